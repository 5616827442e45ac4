package scenario

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// S11, the reporter half: one Ready agent (lying, or seeing a one-sided
// loss) reports BFD Down, since an hour ago, for four NotReady nodes. Two
// lanes of six nodes share one sandbox, each with its own peering
// controller (a node selector per lane):
//
//   - veto: another Ready node's agent reports the same four nodes
//     Established (BFD Up). Nobody may leave: one fresh live session
//     vetoes a removal, whatever the other reporter says.
//   - alone: nobody contradicts the reporter (the other Ready node writes
//     no report). The four may leave, but no earlier than the prune grace
//     after rebound saw them NotReady: a reported time never starts a
//     clock. The incident's leave budget (half the set) holds the rest.
//
// The reports are written directly, as S8's liar writes them: through the
// API, as the reporter's PeeringReport, refreshed every Interval.

// S11ReporterOptions tune the scenario. Zero values mean the defaults.
type S11ReporterOptions struct {
	// PruneGrace and ReportMaxAge are the peering controllers'.
	PruneGrace   time.Duration
	ReportMaxAge time.Duration
	// Hold is how long the four nodes stay NotReady (default 3x
	// PruneGrace).
	Hold time.Duration
	// Interval is how often each report is refreshed (default 500 ms).
	Interval time.Duration
	// ReportedDownFor is how long ago the lone reporter says BFD lost
	// them (default an hour).
	ReportedDownFor time.Duration
	Logs            io.Writer
}

func (o S11ReporterOptions) withDefaults() S11ReporterOptions {
	if o.PruneGrace == 0 {
		o.PruneGrace = 5 * time.Second
	}
	if o.ReportMaxAge == 0 {
		o.ReportMaxAge = 20 * time.Second
	}
	if o.Hold == 0 {
		o.Hold = 3 * o.PruneGrace
	}
	if o.Interval == 0 {
		o.Interval = 500 * time.Millisecond
	}
	if o.ReportedDownFor == 0 {
		o.ReportedDownFor = time.Hour
	}
	if o.Logs == nil {
		o.Logs = io.Discard
	}
	return o
}

// S11Lane is one lane's outcome.
type S11Lane struct {
	// Reporter reports the four nodes down; Contradictor, in the veto
	// lane, reports them up. Down are the four nodes.
	Reporter, Contradictor string
	Down                   []string
	// Removed maps each node that left the lane's set to the delay from
	// its Ready condition's lastTransitionTime (the API's, to the second,
	// so never later than rebound's first sight) to the removal as the
	// watch saw it.
	Removed map[string]time.Duration
	// Messages are the PeerSetRemoved Events' messages, by node.
	Messages map[string]string
	// Reasons is each of the four's published reason at the end, for
	// those still in the set.
	Reasons map[string]peering.Reason
	// Budget is the incident's leave budget: half the six members.
	Budget int
}

// S11ReporterResult is what the scenario measured.
type S11ReporterResult struct {
	Veto, Alone S11Lane
	// AllNotReady is how long all eight nodes were NotReady at once, from
	// the API's timestamps: the last of their NotReady transitions to the
	// first of their Ready transitions after the heal.
	AllNotReady time.Duration
}

// S11OneReporter plays both lanes on a sandbox of 12 nodes: node-0..5
// are the veto lane (node-0 reports down, node-1 up), node-6..11 the
// alone lane (node-6 reports down, node-7 is silent).
func S11OneReporter(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S11ReporterOptions) (S11ReporterResult, error) {
	opts = opts.withDefaults()
	var res S11ReporterResult
	if len(c.NodeNames) != 12 {
		return res, fmt.Errorf("S11OneReporter needs 12 nodes, the sandbox has %d", len(c.NodeNames))
	}
	const laneLabel = "s11.rebound.dev/lane"
	names := c.NodeNames
	lanes := []*S11Lane{
		{Reporter: names[0], Contradictor: names[1], Down: slices.Clone(names[2:6])},
		{Reporter: names[6], Down: slices.Clone(names[8:12])},
	}
	laneName := []string{"veto", "alone"}
	for i, n := range names {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:"10.89.0.%d/32"}}}`, laneLabel, laneName[i/6], peering.AnnotationCalicoIPv4, i+1)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return res, err
		}
	}
	sets := make([]types.NamespacedName, len(lanes))
	for i, lane := range lanes {
		pc, err := StartPeeringController(ctx, c, controller.PeeringOptions{
			Name:         "peering-s11-" + laneName[i],
			NodeSelector: labels.SelectorFromSet(labels.Set{laneLabel: laneName[i]}),
			Config:       peering.Config{PruneGracePeriod: opts.PruneGrace, Evidence: peering.EvidenceOptions{ReportMaxAge: opts.ReportMaxAge}},
			State:        types.NamespacedName{Namespace: controller.DefaultPeeringNamespace, Name: "rebound-peering-s11-" + laneName[i]},
		}, opts.Logs)
		if err != nil {
			return res, err
		}
		defer pc.Stop()
		sets[i] = pc.PeerSet
		if err := waitMembers(ctx, c, pc.PeerSet, 60*time.Second, laneName[i]+": every node in the set", func(m []string) bool { return len(m) == 6 }); err != nil {
			return res, err
		}
		lane.Budget = int(peering.Config{}.WithDefaults().MaxLeaveShare * 6)
	}
	if err := waitLabelled(ctx, c, names); err != nil {
		return res, err
	}

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return res, err
	}
	// Both claims are about one moment an hour ago: a session state's
	// Since is when BIRD saw it change, fixed, not moving with the report.
	reportedAt := time.Now().Add(-opts.ReportedDownFor)
	sessions := func(peers []string, state, bfd string) []peering.Session {
		out := make([]peering.Session, 0, len(peers))
		for _, p := range peers {
			out = append(out, peering.Session{Peer: p, State: state, BFD: bfd, Since: reportedAt})
		}
		return out
	}
	writer := &reportLoop{w: agent.APIReportWriter{Client: dyn}, every: opts.Interval, sessions: map[string][]peering.Session{
		lanes[0].Reporter:     sessions(lanes[0].Down, "Active", peering.BFDDown),
		lanes[0].Contradictor: sessions(lanes[0].Down, peering.StateEstablished, peering.BFDUp),
		lanes[1].Reporter:     sessions(lanes[1].Down, "Active", peering.BFDDown),
	}}
	tl.Step("%s reports BFD Down since %s ago for %s; %s reports them Established; %s reports BFD Down for %s, nobody contradicts",
		lanes[0].Reporter, opts.ReportedDownFor, strings.Join(lanes[0].Down, ","), lanes[0].Contradictor, lanes[1].Reporter, strings.Join(lanes[1].Down, ","))
	rctx, stopReports := context.WithCancel(ctx)
	defer stopReports()
	go writer.run(rctx)

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	recs := make([]*removalRecorder, len(lanes))
	for i, lane := range lanes {
		if recs[i], err = recordRemovals(wctx, c, sets[i], lane.Down); err != nil {
			return res, err
		}
	}
	var cut []string
	for _, lane := range lanes {
		cut = append(cut, lane.Down...)
	}
	tl.Step("stop %s", strings.Join(cut, ", "))
	for _, n := range cut {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range cut {
		if err := c.WaitNodeReady(ctx, n, false, c.Timings.NodeMonitorGracePeriod+time.Minute); err != nil {
			return res, err
		}
	}
	tl.Step("all eight NotReady; hold %s", opts.Hold)
	if err := sleep(ctx, opts.Hold); err != nil {
		return res, err
	}
	allDown, err := lastNotReady(ctx, c.Client, cut)
	if err != nil {
		return res, fmt.Errorf("at the hold's end: %w", err)
	}
	if err := writer.lastErr(); err != nil {
		return res, fmt.Errorf("the reports: %w", err)
	}

	for i, lane := range lanes {
		removed, _, err := recs[i].removals()
		if err != nil {
			return res, err
		}
		lane.Removed, lane.Messages, lane.Reasons = map[string]time.Duration{}, map[string]string{}, map[string]peering.Reason{}
		for _, name := range lane.Down {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return res, err
			}
			if at, ok := removed[name]; ok {
				_, notReadyAt := kubestatus.NodeReadySince(n)
				lane.Removed[name] = at.Sub(notReadyAt)
				if lane.Messages[name], err = removalMessage(ctx, c, name); err != nil {
					return res, err
				}
			}
		}
		s, err := PublishedSet(ctx, c.Client, sets[i])
		if err != nil {
			return res, err
		}
		if s != nil {
			for _, p := range s.Peers {
				if slices.Contains(lane.Down, p.Name) {
					lane.Reasons[p.Name] = p.Reason
				}
			}
		}
		tl.Step("%s lane: removed %v, still in %v", laneName[i], lane.Removed, lane.Reasons)
	}
	res.Veto, res.Alone = *lanes[0], *lanes[1]

	// The heal, which ends the window in the API.
	for _, n := range cut {
		if err := c.StartNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range cut {
		if err := c.WaitNodeReady(ctx, n, true, c.Timings.NodeMonitorGracePeriod+time.Minute); err != nil {
			return res, err
		}
	}
	back, err := firstReady(ctx, c.Client, cut)
	if err != nil {
		return res, fmt.Errorf("after the heal: %w", err)
	}
	res.AllNotReady = back.Sub(allDown)
	return res, nil
}

// removalMessage is the message of the latest PeerSetRemoved Event about
// node, "" when there is none.
func removalMessage(ctx context.Context, c *sandbox.Cluster, node string) (string, error) {
	evs, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=PeerSetRemoved",
	})
	if err != nil {
		return "", err
	}
	var latest *corev1.Event
	for i := range evs.Items {
		if latest == nil || evs.Items[i].CreationTimestamp.After(latest.CreationTimestamp.Time) {
			latest = &evs.Items[i]
		}
	}
	if latest == nil {
		return "", nil
	}
	return latest.Message, nil
}

// reportLoop writes, for each reporter, a fresh report (observed now)
// of its sessions, every interval, until ctx ends.
type reportLoop struct {
	w        agent.ReportWriter
	every    time.Duration
	sessions map[string][]peering.Session

	mu  sync.Mutex
	err error // the last failed write
}

func (l *reportLoop) run(ctx context.Context) {
	for {
		for reporter, sessions := range l.sessions {
			now := time.Now()
			err := l.w.WriteReport(ctx, peering.Report{Reporter: reporter, ObservedAt: now, Sessions: sessions})
			if err != nil && ctx.Err() == nil {
				l.mu.Lock()
				l.err = fmt.Errorf("%s's report: %w", reporter, err)
				l.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.every):
		}
	}
}

func (l *reportLoop) lastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
