package unreachable

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/liveness"
)

// The adversarial rows run the real liveness.Assess on a simulated
// cluster, pass after pass, and apply each plan as the controller would,
// so that what the budget sees is what the verdicts and the earlier
// passes left in the cluster.

const (
	renewInterval = 10 * time.Second // the kubelet's default
	gossipDelay   = 3 * time.Second  // a watcher's probes notice a death
)

// sim is a cluster of Ready nodes that gossip and renew their Leases.
type sim struct {
	t     *testing.T
	now   time.Time
	names []string
	nodes map[string]*corev1.Node
	pods  []*corev1.Pod
	// diedAt: the Lease stops and the gossip sees it dead gossipDelay
	// later. leaseStopped: the Lease stops, the node lives (cut off from
	// the API). lastRenew is rebound's last sight of each renewal.
	diedAt       map[string]time.Time
	leaseStopped map[string]time.Time
	lastRenew    map[string]time.Time
	// lies maps a watcher to what it says of every member it watches;
	// skew shifts a reporter's clock.
	lies map[string]string
	skew map[string]time.Duration
	// restartedAt is when rebound's Lease tracker last started: no
	// renewal is older than that.
	restartedAt time.Time
	// distrust is the history of the planes' disagreements the verdicts
	// read (nil: none kept, no restart hold).
	distrust   *liveness.Distrust
	ledger     []Mark
	opts       Options
	maxTainted int
}

func newSim(t *testing.T, n int) *sim {
	s := &sim{t: t, now: t0, nodes: map[string]*corev1.Node{}, diedAt: map[string]time.Time{}, leaseStopped: map[string]time.Time{},
		lastRenew: map[string]time.Time{}, lies: map[string]string{}, skew: map[string]time.Duration{}, opts: Options{MarkPodsNotReady: true}}
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		s.names = append(s.names, name)
		s.nodes[name] = node(name, true)
		s.pods = append(s.pods, pod("web-"+name, name, corev1.ConditionTrue), pod("dns-"+name, name, corev1.ConditionTrue))
	}
	return s
}

func (s *sim) die(name string) { s.diedAt[name] = s.now }

// leaseOf is the Lease plane as rebound's tracker holds it now: renewed
// every renewInterval until it stopped (each node's kubelet at its own
// phase, a second apart), never seen before the restart.
func (s *sim) leaseOf(name string) liveness.Lease {
	end := s.now
	if at, ok := s.diedAt[name]; ok && at.Before(end) {
		end = at
	}
	if at, ok := s.leaseStopped[name]; ok && at.Before(end) {
		end = at
	}
	phase := time.Duration(slices.Index(s.names, name)%10) * time.Second
	last := end.Add(-phase).Truncate(renewInterval).Add(phase)
	if !last.After(s.restartedAt) && !s.restartedAt.IsZero() {
		// The tracker's first sight, no renewal watched.
		return liveness.Lease{RenewSeen: s.restartedAt, RenewInterval: renewInterval, FirstSight: true}
	}
	return liveness.Lease{RenewSeen: last, RenewInterval: renewInterval}
}

func (s *sim) verdicts() map[string]liveness.NodeVerdict {
	in := liveness.Input{Leases: map[string]liveness.Lease{}, FirstSeen: map[string]time.Time{}, Distrust: s.distrust}
	for _, name := range s.names {
		n := s.nodes[name]
		in.Nodes = append(in.Nodes, liveness.Node{Name: name, Ready: readyNode(n), Transition: t0.Add(-time.Hour)})
		in.Leases[name] = s.leaseOf(name)
		if at, dead := s.diedAt[name]; dead && !at.After(s.now) {
			continue // a dead agent writes nothing
		}
		g := &liveness.GossipReport{ObservedAt: s.now.Add(s.skew[name]), Members: len(s.names)}
		for _, m := range liveness.Watched(name, s.names, liveness.DefaultWatchers) {
			state, since := liveness.GossipAlive, t0.Add(-time.Hour)
			if at, dead := s.diedAt[m]; dead && s.now.Sub(at) >= gossipDelay {
				state, since = liveness.GossipDead, at.Add(gossipDelay)
			}
			if lie, ok := s.lies[name]; ok {
				// A liar says nothing of since when: no Lease renewal
				// can refute it.
				state, since = lie, time.Time{}
			}
			g.Watches = append(g.Watches, liveness.Watch{Node: m, State: state, Since: since})
		}
		in.Reports = append(in.Reports, liveness.Report{Reporter: name, Gossip: g})
	}
	return liveness.Assess(in, s.now).Nodes
}

func readyNode(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pass plans and applies the plan as the controller does: taints first,
// a pod marked only once its node carries the taint.
func (s *sim) pass() Plan {
	snap := Snapshot{Now: s.now, Pods: s.pods, Verdicts: s.verdicts(), Recent: s.ledger, Options: s.opts}
	for _, name := range s.names {
		snap.Nodes = append(snap.Nodes, s.nodes[name])
	}
	p := PlanFor(snap)
	for _, a := range p.Actions {
		n := s.nodes[a.Node]
		switch a.Kind {
		case AddTaint:
			n.Spec.Taints, _ = WithTaint(n.Spec.Taints, metav1.NewTime(s.now.Truncate(time.Second)))
			s.ledger = append(s.ledger, Mark{Node: a.Node, At: s.now})
		case RemoveTaint:
			n.Spec.Taints, _ = WithoutTaint(n.Spec.Taints)
		case MarkPodNotReady:
			if Tainted(n) == nil {
				s.t.Fatalf("%s: %s planned on %s without rebound's taint", s.now.Sub(t0), a.Key(), a.Node)
			}
			for _, pd := range s.pods {
				if pd.Name == a.Pod {
					pd.Status.Conditions = []corev1.PodCondition{NotReadyCondition(a.Node, metav1.NewTime(s.now))}
				}
			}
		}
	}
	tainted := s.tainted()
	s.maxTainted = max(s.maxTainted, len(tainted))
	if limit := maxUnreachable(len(s.names), 0); len(tainted) > limit {
		s.t.Fatalf("%s: %d nodes tainted %v, more than the budget's %d", s.now.Sub(t0), len(tainted), tainted, limit)
	}
	if marked := s.markedWithin(time.Minute); marked > marksPerMinute(len(s.names), 0) {
		s.t.Fatalf("%s: %d marks within a minute, more than %d", s.now.Sub(t0), marked, marksPerMinute(len(s.names), 0))
	}
	return p
}

func (s *sim) run(until time.Duration, step time.Duration, each func()) Plan {
	var p Plan
	for s.now.Before(t0.Add(until)) {
		if each != nil {
			each()
		}
		p = s.pass()
		s.now = s.now.Add(step)
	}
	return p
}

func (s *sim) tainted() []string {
	var out []string
	for _, name := range s.names {
		if Tainted(s.nodes[name]) != nil {
			out = append(out, name)
		}
	}
	return out
}

func (s *sim) markedWithin(d time.Duration) int {
	n := 0
	for _, m := range s.ledger {
		if m.At.After(s.now.Add(-d)) {
			n++
		}
	}
	return n
}

func (s *sim) notReadyPods() []string {
	var out []string
	for _, p := range s.pods {
		if !NeedsMark(p, p.Spec.NodeName) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestPlanOneDeath: the positive lane. One node of five dies outright; it
// is tainted once both planes agree, its pods marked in the same pass.
func TestPlanOneDeath(t *testing.T) {
	s := newSim(t, 5)
	s.now = t0.Add(time.Second)
	s.die("node-3")
	p := s.run(20*time.Second, time.Second, nil)
	if got := s.tainted(); !slices.Equal(got, []string{"node-3"}) {
		t.Fatalf("tainted %v, want [node-3]", got)
	}
	if got := s.notReadyPods(); !slices.Equal(got, []string{"dns-node-3", "web-node-3"}) {
		t.Errorf("not ready pods %v, want node-3's two", got)
	}
	if len(p.Actions) != 0 || len(p.Held) != 0 {
		t.Errorf("a later pass still acts: %v", keys(p))
	}
	if at := s.ledger[0].At.Sub(s.diedAt["node-3"]); at > renewInterval+liveness.DefaultLeaseMargin+time.Second {
		t.Errorf("marked %v after death, later than one renew interval and the margin", at)
	}
}

// TestPlanStaggeredDeaths: six nodes of twenty die one a second, each
// with live watchers to see it. They are marked at most the rate's two a
// minute (the rest held, saying why, and marked as the window moves),
// never more than half of the nodes at once, and no live node ever.
func TestPlanStaggeredDeaths(t *testing.T) {
	s := newSim(t, 20)
	var victims []string
	watchers := map[string]bool{}
	for _, n := range s.names {
		ws := liveness.Watchers(n, s.names, liveness.DefaultWatchers)
		if len(victims) == 6 || watchers[n] || slices.ContainsFunc(ws, func(w string) bool { return slices.Contains(victims, w) }) {
			continue
		}
		victims = append(victims, n)
		for _, w := range ws {
			watchers[w] = true
		}
	}
	if len(victims) < 4 {
		t.Fatalf("only %d victims with live watchers on the ring", len(victims))
	}
	rateHeld := map[string]bool{}
	for s.now.Before(t0.Add(3 * time.Minute)) {
		if i := int(s.now.Sub(t0) / time.Second); i < len(victims) {
			s.die(victims[i])
		}
		p := s.pass()
		for _, h := range p.Held {
			if h.Kind != HeldRateLimited || !strings.Contains(h.Reason, "dead on both planes") || !strings.Contains(h.Reason, "within the last minute") {
				t.Errorf("%s: hold %s of %s: %s", s.now.Sub(t0), h.Kind, h.Node, h.Reason)
			}
			rateHeld[h.Node] = true
		}
		s.now = s.now.Add(time.Second)
	}
	if len(rateHeld) == 0 {
		t.Error("no death was held by the rate: six marks within seconds")
	}
	if got := sortedCopy(s.tainted()); !slices.Equal(got, sortedCopy(victims)) {
		t.Errorf("after three minutes tainted %v, want every victim %v", got, victims)
	}
	t.Logf("victims %v; at most %d tainted at once; marks at %v", victims, s.maxTainted, s.ledger)
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestPlanLiar: one watcher lies. Saying dead of everyone it watches, it
// cannot take a live node out (a quorum of two is needed, and the others
// say alive); saying alive of everyone, it keeps a dead node it watches
// from being marked early (upstream's timing), never more.
func TestPlanLiar(t *testing.T) {
	t.Run("says dead", func(t *testing.T) {
		s := newSim(t, 5)
		s.lies["node-0"] = liveness.GossipDead
		s.run(30*time.Second, time.Second, nil)
		if got := s.tainted(); len(got) != 0 {
			t.Errorf("tainted %v on one liar's word", got)
		}
	})
	t.Run("says alive", func(t *testing.T) {
		s := newSim(t, 5)
		victim := liveness.Watched("node-0", s.names, liveness.DefaultWatchers)[0]
		s.lies["node-0"] = liveness.GossipAlive
		s.die(victim)
		s.run(30*time.Second, time.Second, nil)
		if got := s.tainted(); len(got) != 0 {
			t.Errorf("tainted %v although a watcher (lying or not) has it alive", got)
		}
	})
}

// TestPlanAllLeasesStale: the control plane fails (every Lease stops being
// renewed at once, for the kubelets cannot reach the API) while every node
// lives. The gossip says alive: every node is CutOffFromAPI, and nothing
// is tainted; a taint left from before comes off.
func TestPlanAllLeasesStale(t *testing.T) {
	s := newSim(t, 5)
	s.nodes["node-2"].Spec.Taints = []corev1.Taint{ours(t0.Add(-time.Minute))}
	for _, n := range s.names {
		s.leaseStopped[n] = t0
	}
	s.now = t0.Add(30 * time.Second)
	v := s.verdicts()
	for _, n := range s.names {
		if v[n].Verdict != liveness.CutOffFromAPI {
			t.Fatalf("%s is %s, want CutOffFromAPI: %s", n, v[n].Verdict, v[n].Reason)
		}
	}
	p := s.pass()
	if got := keys(p); !slices.Equal(got, []string{"RemoveTaint node-2"}) {
		t.Errorf("plan %v, want only the old taint removed", got)
	}
	if got := s.notReadyPods(); len(got) != 0 {
		t.Errorf("pods marked not ready: %v", got)
	}
}

// TestPlanRestartMidAction: the controller dies after tainting node-3 and
// marking one of its two pods. The new process has no Lease history: the
// taint comes off (fail open), and it does not come back while the new
// process has not watched node-3's Lease renew once (a first sight
// refutes no gossip vote, so the plane is not trusted on it): node-3 is
// left to upstream's NotReady. A second pass repeats nothing.
func TestPlanRestartMidAction(t *testing.T) {
	s := newSim(t, 5)
	s.die("node-3")
	s.now = t0.Add(40 * time.Second)
	s.nodes["node-3"].Spec.Taints = []corev1.Taint{ours(t0.Add(13 * time.Second))}
	s.pods[6].Status.Conditions = []corev1.PodCondition{NotReadyCondition("node-3", metav1.NewTime(t0.Add(13*time.Second)))} // web-node-3
	s.restartedAt = s.now

	if got := keys(s.pass()); !slices.Equal(got, []string{"RemoveTaint node-3"}) {
		t.Fatalf("first pass after the restart: %v, want the taint off (no Lease history yet)", got)
	}
	s.now = s.now.Add(renewInterval + liveness.DefaultLeaseMargin + time.Second)
	if got := keys(s.pass()); len(got) != 0 {
		t.Fatalf("once the first-sight Lease is stale: %v, want nothing (no renewal watched: not judged early)", got)
	}
	if got := keys(s.pass()); len(got) != 0 {
		t.Errorf("the next pass repeats %v", got)
	}
}

// TestPlanSkewedReports: a watcher whose clock runs ahead writes gossip
// reads from the future; beyond the allowed skew they do not count, and
// with them short of a quorum nothing is marked.
func TestPlanSkewedReports(t *testing.T) {
	s := newSim(t, 5)
	victim := "node-3"
	ws := liveness.Watchers(victim, s.names, liveness.DefaultWatchers)
	for _, w := range ws[:2] {
		s.skew[w] = 10 * time.Minute
	}
	s.die(victim)
	s.run(30*time.Second, time.Second, nil)
	if got := s.tainted(); len(got) != 0 {
		t.Errorf("tainted %v on reads from the future", got)
	}
}
