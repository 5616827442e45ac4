package scale

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/deploy"
	"rebound/internal/agent"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// PeeringResult is what MeasurePeering measured.
type PeeringResult struct {
	// AgentBytesPerMin is the response bytes one agent received from the
	// apiserver per minute (its watch of the published set and the answers
	// to its own report writes) while every node's agent reported.
	AgentBytesPerMin float64 `json:"agentBytesPerMin"`
	// ReportsPerMin are the reports written cluster-wide per minute.
	ReportsPerMin float64 `json:"reportsPerMin"`
	// ControllerRSSMiB and ControllerPeakMiB are the peering controller's.
	ControllerRSSMiB  float64 `json:"controllerRssMiB"`
	ControllerPeakMiB float64 `json:"controllerPeakMiB"`
}

// MeasurePeering runs `rebound controller --peering --no-recovery` as its
// own process and one real agent in this process (its BIRD absent: what it
// receives does not depend on it), while a report is written for every
// other node once a minute, as their agents would, through the agent's own
// writer. It returns after warm-up plus window.
func MeasurePeering(ctx context.Context, c *sandbox.Cluster, bin string, window time.Duration, progress io.Writer) (PeeringResult, error) {
	var res PeeringResult
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return res, err
	}
	if _, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-scale"}, deploy.PeeringReportCRD); err != nil {
		return res, err
	}
	// Calico's address annotation makes every node a BGP node.
	err = sandbox.Parallel(ctx, len(c.NodeNames), 16, func(ctx context.Context, i int) error {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, peering.AnnotationCalicoIPv4, sandbox.NodeAddress(i)+"/32")
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, c.NodeNames[i], types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("annotate nodes: %w", err)
	}
	// The scale run's recovery controller still holds the leader-election
	// Lease, and this one measures the peering controller on its own
	// beside it: without the flag it would wait for that Lease for ever.
	ctl, err := StartControllerAs(c, c.Kubeconfig, bin, "rebound-peering-scale", "--no-recovery", "--peering", "--leader-elect=false")
	if err != nil {
		return res, err
	}
	defer ctl.Signal(syscall.SIGTERM)
	if err := ctl.WaitReady(ctx, 3*time.Minute); err != nil {
		return res, err
	}

	// The others' reports, spread over each minute.
	dyn, err := dynamic.NewForConfig(unthrottled(c.Config, nil))
	if err != nil {
		return res, err
	}
	others := agent.APIReportWriter{Client: dyn}
	var written atomic.Int64
	rctx, stopReports := context.WithCancel(ctx)
	defer stopReports()
	go func() {
		n := len(c.NodeNames)
		tick := time.NewTicker(time.Minute / time.Duration(n))
		defer tick.Stop()
		for i := 1; ; i = i%(n-1) + 1 { // node-0 is the measured agent
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			// A real agent echoes the generation of the set it applied.
			r := peering.Report{Reporter: c.NodeNames[i], ObservedAt: time.Now(), SetGeneration: publishedGeneration(rctx, c), Established: n - 1}
			if others.WriteReport(rctx, r) == nil {
				written.Add(1)
			}
		}
	}()

	// The measured agent, with a client that counts what it receives.
	var received atomic.Int64
	cfg := unthrottled(c.Config, &received)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	adyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "rb-agent-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	a, err := agent.New(agent.Options{
		NodeName: c.NodeNames[0], Client: cs, Reports: agent.APIReportWriter{Client: adyn},
		Version: bird.Bird16, MeshPath: filepath.Join(dir, "mesh.conf"), Socket: filepath.Join(dir, "absent.ctl"),
		PeerSet: types.NamespacedName{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName},
		AS:      64512, Address: netip.MustParseAddr(sandbox.NodeAddress(0)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return res, err
	}
	actx, stopAgent := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	defer func() { stopAgent(); <-done }()

	fmt.Fprintf(progress, "  peering: controller and %d reporting agents; warming up for 30s, then measuring one agent for %s\n", len(c.NodeNames), window)
	if err := sleep(ctx, 30*time.Second); err != nil {
		return res, err
	}
	b0, w0, t0 := received.Load(), written.Load(), time.Now()
	if err := sleep(ctx, window); err != nil {
		return res, err
	}
	b1, w1, t1 := received.Load(), written.Load(), time.Now()
	minutes := t1.Sub(t0).Minutes()
	res.AgentBytesPerMin = float64(b1-b0) / minutes
	res.ReportsPerMin = float64(w1-w0) / minutes
	s, err := SampleProc(ctl.PID)
	if err != nil {
		return res, err
	}
	res.ControllerRSSMiB, res.ControllerPeakMiB = s.RSSMiB, s.PeakMiB
	return res, nil
}

// unthrottled copies cfg without client-side rate limiting; with count,
// every response body read through it is counted.
func unthrottled(cfg *rest.Config, count *atomic.Int64) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = -1, 0
	if count != nil {
		out.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt: rt, n: count} }
	}
	return out
}

type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		resp.Body = countingBody{ReadCloser: resp.Body, n: t.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// publishedGeneration reads the published set's generation (0 when there
// is none yet).
func publishedGeneration(ctx context.Context, c *sandbox.Cluster) int64 {
	cm, err := c.Client.CoreV1().ConfigMaps(peering.DefaultPeerSetNamespace).Get(ctx, peering.DefaultPeerSetName, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return 0
	}
	set, err := peering.ParsePeerSet(cm.Data[peering.PeerSetKey])
	if err != nil {
		return 0
	}
	return set.Generation
}
