package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/scenario"
	"rebound/pkg/peering/bird"
)

var s4Info = ScenarioInfo{
	ID:    "S4",
	Title: "a BGP node returns while half its peers are dead (real BIRD)",
	Description: "5 BIRD daemons in a full mesh in Calico's style (graceful restart, wait 240 s), on loopback addresses; " +
		"node-1, node-2 and node-3 are killed, then node-1 returns in graceful-restart recovery (bird -R). " +
		"Without rebound its configuration still lists every node and it waits for the dead peers; with rebound, " +
		"its agent applies the health-aware peer set (the live nodes). No sandbox: the BGP part alone, as rebound-bench s4 runs it.",
	Measure: "from node-1's BIRD starting to every live node having node-1's route",
}

// s4Nets are the lab loopback /16s of the demo's two S4 lanes, apart from
// the e2e tests' (11-14, 21, 31) and rebound-bench's (1-30).
var s4Nets = [2]int{51, 52}

// startS4 plays S4's two lanes in the background, from the start of the
// run: BIRD's 240 s wait is the longest part of the demo, and it needs no
// sandbox. wait returns the lanes once both are done. Without BIRD the
// lanes say so instead of failing the demo.
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
	fmt.Fprintf(env.opts.Progress, "S4: two labs of 5 BIRD daemons (%s) in the background; BIRD's graceful restart wait is 240 s\n", bins.Banner)
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
			res, err := scenario.RunS4(ctx, tl, scenario.S4Options{Bins: bins, Nodes: 5, Net: s4Nets[i], Rebound: l.Rebound})
			errs[i] = err
			l.Events = tl.Events()
			l.S4 = &res
			l.setRecovery("node-1 returns", res.RestartedAt, res.RecoveredAt, res.Recovered)
			if res.Recovered {
				l.Outcome = fmt.Sprintf("%.1fs (routes restored)", l.RecoverySeconds)
				if l.RecoverySeconds >= float64(res.WaitSeconds)-5 {
					l.Outcome = fmt.Sprintf("%.1fs (BIRD's %d s graceful restart wait ran out)", l.RecoverySeconds, res.WaitSeconds)
				}
			} else {
				l.Outcome = fmt.Sprintf("never: no route within %ds + 60s", res.WaitSeconds)
			}
		}()
	}
	return func() ([]Lane, error) {
		if env.aborted {
			wg.Wait()
			return nil, nil
		}
		header(env, "S4: 5 BIRD nodes, full mesh, graceful restart (wait 240 s); node-1, node-2, node-3 die; node-1 returns (bird -R).",
			"Without: node-1 still peers with every node. With: its rebound agent applies the peer set (the live nodes). Started with the first scenario.")
		if held != nil {
			held.release()
		}
		wg.Wait()
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
