package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/report"
	"rebound/pkg/peering/bird"
)

// S4Return plays S4 for several return times and BIRD versions at once:
// in each lab 10 nodes, 5 die, one of them returns ReturnAfter after the
// failure, without and with rebound. Every lane is its own lab, and all
// run at the same time, so the baseline and rebound are compared in the
// same run and the whole matrix takes the longest lane (the last return
// plus BIRD's 240 s wait), not their sum. `rebound-bench s4
// --return-after` and TestS4Return call it.

// S4ReturnOptions tune the matrix.
type S4ReturnOptions struct {
	// Bins are the BIRD versions to play.
	Bins []birdproc.Binaries
	// ReturnAfter are the return times after the failure.
	ReturnAfter []time.Duration
	// Sizes are the lab sizes (nodes; half of them, rounded up, die);
	// nil means 10.
	Sizes []int
	// FirstNet is the loopback /16 of the first lane; the others follow
	// (birdlab.Options.Net). 0 means 33.
	FirstNet int
	// NetNS runs each lab in its own network namespace and measures the
	// returning node's kernel table (root only).
	NetNS bool
	// Progress, when set, gets every lane's timeline, prefixed by its name.
	Progress io.Writer
	// Lane adjusts one lane's options before it runs (tests' hooks).
	Lane func(l S4Lane, opts *S4Options)
}

// S4Lane is one lane of the matrix.
type S4Lane struct {
	Bird        bird.Version
	Nodes       int
	ReturnAfter time.Duration
	Rebound     bool
	Result      S4Result
	Err         error
	Events      []Event
}

// Name is the lane's name in METRIC lines: s4_return10s_bird16_with_rebound
// (10 nodes), s4_return10s_bird16_30nodes_with_rebound (other sizes).
func (l S4Lane) Name() string {
	mode := "without"
	if l.Rebound {
		mode = "with"
	}
	size := ""
	if l.Nodes != 10 {
		size = fmt.Sprintf("_%dnodes", l.Nodes)
	}
	return fmt.Sprintf("s4_return%s_%s%s_%s_rebound", durationTag(l.ReturnAfter), versionTag(l.Bird), size, mode)
}

func durationTag(d time.Duration) string {
	return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
}

func versionTag(v bird.Version) string { return "bird" + strings.ReplaceAll(string(v), ".", "") }

// RunS4Return runs every lane at the same time and returns them in the
// order bins x return times x {without, with}.
func RunS4Return(ctx context.Context, opts S4ReturnOptions) []S4Lane {
	if len(opts.Sizes) == 0 {
		opts.Sizes = []int{10}
	}
	if opts.FirstNet == 0 {
		opts.FirstNet = 33
	}
	var lanes []S4Lane
	for _, b := range opts.Bins {
		for _, n := range opts.Sizes {
			for _, after := range opts.ReturnAfter {
				for _, rebound := range []bool{false, true} {
					lanes = append(lanes, S4Lane{Bird: b.Version, Nodes: n, ReturnAfter: after, Rebound: rebound})
				}
			}
		}
	}
	bins := map[bird.Version]birdproc.Binaries{}
	for _, b := range opts.Bins {
		bins[b.Version] = b
	}
	var mu sync.Mutex // serialises Progress lines
	var wg sync.WaitGroup
	for i := range lanes {
		l := &lanes[i]
		wg.Go(func() {
			var out io.Writer
			if opts.Progress != nil {
				out = &prefixWriter{prefix: l.Name() + ": ", w: opts.Progress, mu: &mu}
			}
			tl := NewTimeline(out)
			o := S4Options{
				Bins: bins[l.Bird], Nodes: l.Nodes, Net: opts.FirstNet + i, Rebound: l.Rebound, ReturnAfter: l.ReturnAfter,
				// Shorter than any return time: the live nodes drop the
				// dead nodes' stale routes before B returns.
				GracefulRestartTime: 5,
			}
			if opts.NetNS {
				o.NetNS = fmt.Sprintf("rb-s4r-%d-%d", o.Net, os.Getpid())
			}
			if opts.Lane != nil {
				opts.Lane(*l, &o)
			}
			l.Result, l.Err = RunS4(ctx, tl, o)
			l.Events = tl.Events()
		})
	}
	wg.Wait()
	return lanes
}

// WriteS4ReturnTable prints one row per BIRD version and return time:
// the time from B's BIRD start until traffic flows both ways, without and
// with rebound, and the peers B's BIRD started with.
func WriteS4ReturnTable(w io.Writer, lanes []S4Lane) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BIRD\tnodes\tdead\treturn after\twithout rebound\twith rebound\tB started with (rebound)\t")
	for i := 0; i+1 < len(lanes); i += 2 {
		wo, wi := lanes[i], lanes[i+1]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", wo.Bird, wo.Nodes, (wo.Nodes+1)/2, wo.ReturnAfter, laneCell(wo), laneCell(wi), strings.Join(wi.Result.StartPeers, ","))
	}
	tw.Flush()
}

func laneCell(l S4Lane) string {
	switch {
	case l.Err != nil:
		return "error"
	case !l.Result.Recovered:
		return "not within the cap"
	}
	return fmt.Sprintf("%.1f s", l.Result.Recovery().Seconds())
}

// WriteS4ReturnMetrics prints a METRIC line per recovered lane (measured:
// B's BIRD start to both directions' routes), and a count of 0 and a
// CONFIG line with the cap per lane that did not recover within it.
func WriteS4ReturnMetrics(out io.Writer, lanes []S4Lane) error {
	w := report.NewWriter(out)
	for _, l := range lanes {
		switch {
		case l.Err != nil:
		case l.Result.Recovered:
			w.Metric(l.Name(), l.Result.Recovery().Seconds(), "s")
		default:
			w.Count(l.Name()+"_recovered", 0)
			w.Config(l.Name()+"_observed", l.Result.Cap.Seconds(), "s")
		}
	}
	return w.Err()
}

// prefixWriter writes each line with a prefix, one whole line at a time.
type prefixWriter struct {
	prefix string
	w      io.Writer
	mu     *sync.Mutex
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		p.mu.Lock()
		_, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.mu.Unlock()
		p.buf = p.buf[i+1:]
		if err != nil {
			return len(b), err
		}
	}
}
