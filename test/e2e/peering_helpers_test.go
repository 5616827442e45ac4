package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"rebound/internal/agent"
	"rebound/internal/birdlab"
	"rebound/internal/controller"
	"rebound/internal/sandbox"
	"rebound/pkg/peering"
)

// startPeeringController runs the peering reconciler in-process against
// the sandbox, as `rebound controller` would, until the test ends.
func startPeeringController(t *testing.T, c *sandbox.Cluster, opts controller.PeeringOptions) {
	t.Helper()
	setCtrlLogger.Do(func() { ctrl.SetLogger(logr.Discard()) })
	ctx, cancel := context.WithCancel(context.Background())
	ns := opts.State.Namespace
	if ns == "" {
		ns = controller.DefaultPeeringNamespace
	}
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	skip := true
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 controller.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several tests run their own manager in this process.
		Controller: config.Controller{SkipNameValidation: &skip},
		Logger:     logr.FromSlogHandler(slog.NewTextHandler(testLogWriter(t), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.SetupPeering(mgr, opts); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("peering controller: %v", err)
		}
	})
}

// setCtrlLogger silences controller-runtime's warning about a missing
// global logger; each manager logs through its own.
var setCtrlLogger sync.Once

// runningAgent is an agent started by startAgent.
type runningAgent struct {
	*agent.Agent
	URL    string // its probe server
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Stop ends the agent, as its node dying would.
func (r *runningAgent) Stop() error {
	var err error
	r.once.Do(func() {
		r.cancel()
		err = <-r.done
	})
	return err
}

// readyz returns the agent's /readyz status code and body, over HTTP.
func (r *runningAgent) readyz() (int, string) {
	resp, err := http.Get(r.URL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// startAgent runs `rebound agent` in-process for one lab node, with its
// own API client and a probe server on loopback.
func startAgent(t *testing.T, c *sandbox.Cluster, lab *birdlab.Lab, n *birdlab.Node, opts agent.Options) *runningAgent {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	opts.NodeName, opts.Client = n.Name, cs
	opts.MeshPath, opts.Socket = n.MeshPath, n.Socket
	opts.Address, opts.ListenPort = n.Address, n.Port
	mc := lab.MeshConfig(n, nil)
	opts.Version, opts.AS = mc.Version, mc.AS
	opts.GracefulRestartTime, opts.GracefulRestartWait = mc.GracefulRestartTime, mc.GracefulRestartWait
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testLogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{Agent: a, URL: srv.URL, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("agent %s: %v", n.Name, err)
		}
		srv.Close()
	})
	return r
}

// annotateBGP tells the sandbox's Node where its BIRD listens, the way
// Calico records a node's address (and, for several BIRDs on one host, the
// port). label, when set ("key=value"), is added too.
func annotateBGP(ctx context.Context, t *testing.T, c *sandbox.Cluster, n *birdlab.Node, label string) {
	t.Helper()
	labels := ""
	if k, v, ok := strings.Cut(label, "="); ok {
		labels = fmt.Sprintf(`,"labels":{%q:%q}`, k, v)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"%d"}%s}}`,
		peering.AnnotationCalicoIPv4, n.Address.String()+"/32", peering.AnnotationBGPPort, n.Port, labels)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// inSetLabel reads a node's peering.rebound.dev/in-set label.
func inSetLabel(ctx context.Context, c *sandbox.Cluster, name string) (string, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.Labels[peering.LabelInSet], nil
}

// waitInSet waits until the node's label says in (true) or out (false).
func waitInSet(ctx context.Context, t *testing.T, c *sandbox.Cluster, name string, in bool, timeout time.Duration) {
	t.Helper()
	want := fmt.Sprint(in)
	err := birdlab.Poll(ctx, 200*time.Millisecond, timeout, fmt.Sprintf("%s %s=%s", name, peering.LabelInSet, want), func() (bool, string) {
		got, err := inSetLabel(ctx, c, name)
		if err != nil {
			return false, err.Error()
		}
		return got == want, "label is " + got
	})
	if err != nil {
		t.Fatal(err)
	}
}

// poll is birdlab.Poll that fails the test.
func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := birdlab.Poll(ctx, 100*time.Millisecond, timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// shortDir is a temporary folder with a short path (BIRD's control socket
// path must fit in 107 bytes), removed when the test ends.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// netnsName returns a namespace name unique to this process, or "" when
// namespaces cannot be made here (not root): the test then measures
// BIRD's tables only and says so.
func netnsName(t *testing.T, tag string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("not root: no network namespace, so no kernel-table measurement for %s", tag)
		return ""
	}
	return fmt.Sprintf("rb-%s-%d", tag, os.Getpid())
}

// testLogWriter sends component logs to the test output in verbose mode.
func testLogWriter(t *testing.T) io.Writer {
	if w := testWriter(t); w != nil {
		return w
	}
	return io.Discard
}
