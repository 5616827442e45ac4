package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/peering/bird"
)

var s4Info = ScenarioInfo{
	ID:    "S4",
	Title: "a BGP node returns while its peers are dead (real BIRD, real controller and agents)",
	Description: "3 BIRD daemons A, B, C in a full mesh in Calico's style (graceful restart, wait 240 s), on loopback addresses, " +
		"each backed by a Node of one sandbox (node-0..2 without rebound, node-3..5 with); B and C die (BIRD killed, Node stopped), " +
		"then B returns in graceful-restart recovery (bird -R) once its Node is Ready. Without rebound its configuration still lists C " +
		"and it waits for it; with rebound, the peering controller (in-process) takes C out of the set and B's agent renders the live peers. " +
		"The same runner and settings as the e2e tests TestS4Bird16/TestS4Bird2.",
	Measure: "from B's BIRD starting to A having B's route and B having A's",
}

// s4Nets are the lab loopback /16s of the demo's two S4 lanes, apart from
// the e2e tests' (11-14, 21, 31) and rebound-bench's (1-30).
var s4Nets = [2]int{51, 52}

// startS4 plays S4's two lanes in the background, from the start of the
// run: BIRD's 240 s wait is the longest part of the demo. Both lanes
// share one sandbox of their own, each with its own Nodes. wait returns
// the lanes once both are done. Without BIRD the lanes say so instead of
// failing the demo.
func startS4(ctx context.Context, env *runEnv) (wait func() ([]Lane, error)) {
	bins, err := birdproc.Find(bird.Bird16)
	if err != nil {
		note := fmt.Sprintf("not played: %v (%s)", err, birdproc.InstallHint)
		fmt.Fprintf(env.opts.Progress, "S4: %s\n", note)
		lanes := []Lane{
			{Scenario: "S4", Name: laneWithout, Outcome: note},
			{Scenario: "S4", Name: laneWith, Rebound: true, Outcome: note},
		}
		return func() ([]Lane, error) { return lanes, nil }
	}
	fmt.Fprintf(env.opts.Progress, "S4: two labs of %d BIRD daemons (%s) on one %d-node sandbox, in the background; BIRD's graceful restart wait is 240 s\n",
		scenario.S4Nodes, bins.Banner, 2*scenario.S4Nodes)
	lanes := []*Lane{{Scenario: "S4", Name: laneWithout}, {Scenario: "S4", Name: laneWith, Rebound: true}}
	errs := make([]error, len(lanes))
	// The S4 timelines are held back while the sandbox scenarios print
	// theirs, then printed, and printed live from there on.
	var held *heldWriter
	if env.live != nil {
		held = &heldWriter{w: env.live}
	}
	heldEnv := *env
	if held != nil {
		heldEnv.live = held
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := sandbox.Start(ctx, sandbox.Options{
			Dir: filepath.Join(env.dir, "s4"), Binaries: env.bins, Nodes: 2 * scenario.S4Nodes, Timings: env.timings,
			Progress: prefixed(env.opts.Progress, "[S4] "),
		})
		if err != nil {
			errs[0] = fmt.Errorf("start the sandbox: %w", err)
			return
		}
		defer c.Stop()
		var wg sync.WaitGroup
		for i, l := range lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out io.Writer
				if heldEnv.live != nil {
					out = laneWriter(&heldEnv, "S4", l.Name)
				}
				tl := scenario.NewTimeline(out)
				first := i * scenario.S4Nodes
				res, err := scenario.RunS4OnSandbox(ctx, tl, scenario.S4SandboxOptions{
					Cluster: c, Bins: bins, First: first, Net: s4Nets[i], Name: []string{"demo-wo", "demo-w"}[i], Rebound: l.Rebound,
				})
				errs[i] = err
				l.Events = tl.Events()
				l.S4 = &res
				l.setRecovery(c.NodeNames[first+1]+" (B) returns", res.RestartedAt, res.RecoveredAt, res.Recovered)
				if res.Recovered {
					l.Outcome = fmt.Sprintf("%.1fs (routes restored)", l.RecoverySeconds)
					if l.RecoverySeconds >= float64(res.WaitSeconds)-5 {
						l.Outcome = fmt.Sprintf("%.1fs (BIRD's %d s graceful restart wait ran out)", l.RecoverySeconds, res.WaitSeconds)
					}
				} else {
					l.Outcome = fmt.Sprintf("never: no route within %s", res.Cap)
				}
			}()
		}
		wg.Wait()
	}()
	return func() ([]Lane, error) {
		if env.aborted {
			<-done
			return nil, nil
		}
		header(env, "S4: 3 BIRD nodes A, B, C, full mesh, graceful restart (wait 240 s), each with a sandbox Node; B and C die; B returns (bird -R).",
			"Without (node-0..2): B still peers with C. With (node-3..5): the peering controller and an agent per node; B's agent renders the live peers. Started with the first scenario.")
		if held != nil {
			held.release()
		}
		<-done
		for i := range lanes {
			if errs[i] != nil {
				return nil, fmt.Errorf("S4 %s: %w", lanes[i].Name, errs[i])
			}
		}
		return []Lane{*lanes[0], *lanes[1]}, nil
	}
}

// heldWriter buffers writes until release, then writes through.
type heldWriter struct {
	mu       sync.Mutex
	w        io.Writer
	buf      bytes.Buffer
	released bool
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.w.Write(p)
	}
	return h.buf.Write(p)
}

func (h *heldWriter) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.released {
		h.released = true
		_, _ = h.w.Write(h.buf.Bytes())
		h.buf.Reset()
	}
}
