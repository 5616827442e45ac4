package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// startPeeringController runs the peering reconciler in-process against
// the sandbox (scenario.StartPeeringController) until the test ends, and
// returns where it publishes the set: agents need it (Options.PeerSet).
func startPeeringController(t *testing.T, c *sandbox.Cluster, opts controller.PeeringOptions) types.NamespacedName {
	t.Helper()
	setCtrlLogger.Do(func() { ctrl.SetLogger(logr.Discard()) })
	p, err := scenario.StartPeeringController(context.Background(), c, opts, testLogWriter(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("peering controller: %v", err)
		}
	})
	return p.PeerSet
}

// setCtrlLogger silences controller-runtime's warning about a missing
// global logger; each manager logs through its own.
var setCtrlLogger sync.Once

// runningAgent is an agent started by startAgent.
type runningAgent struct {
	*scenario.Agent
	URL string // its probe server
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

// startAgent runs `rebound agent` in-process for one lab node
// (scenario.StartAgent), with a probe server on loopback, until the test
// ends. opts.PeerSet must be what startPeeringController returned.
func startAgent(t *testing.T, c *sandbox.Cluster, lab *birdlab.Lab, n *birdlab.Node, opts agent.Options) *runningAgent {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testLogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	a, err := scenario.StartAgent(c.Config, lab, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Errorf("agent %s: %v", n.Name, err)
		}
		srv.Close()
	})
	return &runningAgent{Agent: a, URL: srv.URL}
}

// annotateBGP tells the sandbox's Node where its BIRD listens
// (scenario.AnnotateBGP). label, when set ("key=value"), is added too.
// birdLabOnSandbox is scenario.BirdLabOnSandbox for a test: the lab's
// nodes are the sandbox's, annotated (and labelled with label, "k=v",
// when it is not empty), and the lab closes when the test ends.
func birdLabOnSandbox(ctx context.Context, t *testing.T, c *sandbox.Cluster, opts birdlab.Options, label string) *birdlab.Lab {
	t.Helper()
	var labels map[string]string
	if k, v, ok := strings.Cut(label, "="); ok {
		labels = map[string]string{k: v}
	}
	lab, err := scenario.BirdLabOnSandbox(ctx, c, opts, labels)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return lab
}

// inSetLabel reads a node's peering.rebound.dev/in-set label.
func inSetLabel(ctx context.Context, c *sandbox.Cluster, name string) (string, error) {
	return scenario.InSetLabel(ctx, c.Client, name)
}

// waitInSet waits until the node's label says in (true) or out (false)
// (scenario.WaitInSet), or fails the test.
func waitInSet(ctx context.Context, t *testing.T, c *sandbox.Cluster, name string, in bool, timeout time.Duration) {
	t.Helper()
	if err := scenario.WaitInSet(ctx, c.Client, name, in, timeout); err != nil {
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

// agentProcess runs `rebound agent ARGS` (the built binary) until the test
// ends, logging to logs/rebound-agent-NAME.log, whose tail the test prints
// when it fails. It returns the process, for a test that kills it.
func agentProcess(t *testing.T, c *sandbox.Cluster, name string, args ...string) *exec.Cmd {
	t.Helper()
	log := filepath.Join(c.Dir, "logs", "rebound-agent-"+name+".log")
	f, err := os.Create(log)
	must(t, err)
	defer f.Close()
	cmd := exec.Command(reboundBinary, append([]string{"agent"}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("rebound agent %s log:\n%s", name, tail(log, 30))
		}
	})
	return cmd
}
