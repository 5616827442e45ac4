package unreachable

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/pkg/liveness"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func node(name string, ready bool, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}},
	}
}

func ours(added time.Time) corev1.Taint {
	return corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: added}}
}

// pod is a pod on node with a Ready condition of status ready ("" for
// none).
func pod(name, node string, ready corev1.ConditionStatus) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"},
		Spec: corev1.PodSpec{NodeName: node}}
	if ready != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: ready}}
	}
	return p
}

var (
	earlyDead = liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, Reason: "Lease stale, 2 of 3 watchers dead"}
	alive     = liveness.NodeVerdict{Verdict: liveness.Alive, Reason: "Ready in the API"}
)

// keys renders a plan's actions and holds for comparison.
func keys(p Plan) []string {
	var out []string
	for _, a := range p.Actions {
		out = append(out, a.Key())
	}
	for _, h := range p.Held {
		out = append(out, "Held"+string(h.Kind)+" "+h.Node)
	}
	return out
}

// TestPlan: one row per rule of the decision table.
func TestPlan(t *testing.T) {
	others := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name  string
		snap  Snapshot
		want  []string
		words string // in the first action's or hold's reason
	}{
		{name: "no verdicts at all: rebound's taint comes off, none goes on (fail open)",
			snap:  Snapshot{Nodes: []*corev1.Node{node("a", true, others, ours(t0.Add(-time.Minute))), node("b", true)}},
			want:  []string{"RemoveTaint a"},
			words: "fail-open"},
		{name: "a node missing from the verdicts: taint off",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true, ours(t0)), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"b": alive, "c": alive}},
			want: []string{"RemoveTaint a"}},
		{name: "Lease renewed or a watcher sees it: Alive, taint off",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true, ours(t0)), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.CutOffFromAPI, Reason: "b has it Alive"}, "b": alive, "c": alive}},
			want:  []string{"RemoveTaint a"},
			words: "CutOffFromAPI"},
		{name: "dead on both planes: taint, then its Ready pods marked; a pod already not ready, one without Ready, another node's are skipped",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true), node("b", true), node("c", true)},
				Pods: []*corev1.Pod{pod("p1", "a", corev1.ConditionTrue), pod("p2", "a", corev1.ConditionFalse), pod("p3", "a", ""),
					pod("p4", "a", corev1.ConditionUnknown), pod("p5", "b", corev1.ConditionTrue)},
				Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead, "b": alive, "c": alive}, Options: Options{MarkPodsNotReady: true}},
			want:  []string{"AddTaint a", "MarkPodNotReady ns/p1", "MarkPodNotReady ns/p4"},
			words: "dead on both planes"},
		{name: "marking off: the taint only",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true), node("b", true), node("c", true)},
				Pods:     []*corev1.Pod{pod("p1", "a", corev1.ConditionTrue)},
				Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead, "b": alive, "c": alive}},
			want: []string{"AddTaint a"}},
		{name: "tainted and still dead: kept, the pods not yet marked are marked",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true, ours(t0.Add(-5*time.Second))), node("b", true), node("c", true)},
				Pods:     []*corev1.Pod{pod("p1", "a", corev1.ConditionFalse), pod("p2", "a", corev1.ConditionTrue)},
				Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead, "b": alive, "c": alive}, Options: Options{MarkPodsNotReady: true}},
			want: []string{"MarkPodNotReady ns/p2"}},
		{name: "tainted, dead, and NotReady now: kept; upstream marks the pods",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true), node("c", true)},
				Pods:     []*corev1.Pod{pod("p1", "a", corev1.ConditionTrue)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Dead, Reason: "NotReady"}, "b": alive, "c": alive}, Options: Options{MarkPodsNotReady: true}},
			want: nil},
		{name: "dead, NotReady, never tainted: nothing, upstream's own taints",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Dead, Reason: "NotReady"}, "b": alive, "c": alive}},
			want: nil},
		{name: "rebound's key with another effect is someone else's: never removed, never counted",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true, corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoExecute}), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": alive, "b": alive, "c": alive}},
			want: nil},
		{name: "budget: 3 of 5 dead at once is more than half: none marked",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true), node("b", true), node("c", true), node("d", true), node("e", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead, "b": earlyDead, "c": earlyDead, "d": alive, "e": alive}},
			want:  []string{"HeldBudget a", "HeldBudget b", "HeldBudget c"},
			words: "global fault"},
		{name: "budget: one marked, two more dead of 5: the two held, the first kept",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true, ours(t0.Add(-time.Hour))), node("b", true), node("c", true), node("d", true), node("e", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead, "b": earlyDead, "c": earlyDead, "d": alive, "e": alive}},
			want: []string{"HeldBudget b", "HeldBudget c"}},
		{name: "budget: 2 of 5 is within half: both marked",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true), node("b", true), node("c", true), node("d", true), node("e", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead, "b": earlyDead, "c": alive, "d": alive, "e": alive}},
			want: []string{"AddTaint a", "AddTaint b"}},
		{name: "rate: two marks this minute (taints' timeAdded) in 10 nodes: the third waits",
			snap: Snapshot{Now: t0, Nodes: append(nodes(7), node("x", true, ours(t0.Add(-50*time.Second))), node("y", true, ours(t0.Add(-10*time.Second))), node("z", true)),
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": earlyDead, "y": earlyDead, "z": earlyDead}, nodes(7)...)},
			want:  []string{"HeldRateLimited z"},
			words: "within the last minute"},
		{name: "rate: a mark whose taint was removed since still counts (the ledger)",
			snap: Snapshot{Now: t0, Nodes: append(nodes(7), node("x", true), node("y", true, ours(t0.Add(-10*time.Second))), node("z", true)),
				Recent:   []Mark{{Node: "x", At: t0.Add(-40 * time.Second)}, {Node: "y", At: t0.Add(-10 * time.Second).Add(300 * time.Millisecond)}},
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": alive, "y": earlyDead, "z": earlyDead}, nodes(7)...)},
			want: []string{"HeldRateLimited z"}},
		{name: "rate: the ledger's entry for a taint still there counts once",
			snap: Snapshot{Now: t0, Nodes: append(nodes(7), node("x", true), node("y", true, ours(t0.Add(-10*time.Second))), node("z", true)),
				Recent:   []Mark{{Node: "y", At: t0.Add(-10 * time.Second).Add(300 * time.Millisecond)}},
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": alive, "y": earlyDead, "z": earlyDead}, nodes(7)...)},
			want: []string{"AddTaint z"}},
		{name: "skewed clock: a taint added in the future by a replica ahead counts as just added",
			snap: Snapshot{Now: t0, Nodes: append(nodes(7), node("x", true, ours(t0.Add(10*time.Minute))), node("y", true, ours(t0.Add(-30*time.Second))), node("z", true)),
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": earlyDead, "y": earlyDead, "z": earlyDead}, nodes(7)...)},
			want: []string{"HeldRateLimited z"}},
		{name: "skewed clock: a taint added long ago (or by a clock behind) is out of the window",
			snap: Snapshot{Now: t0, Nodes: append(nodes(7), node("x", true, ours(t0.Add(-10*time.Minute))), node("y", true, ours(t0.Add(-30*time.Second))), node("z", true)),
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": earlyDead, "y": earlyDead, "z": earlyDead}, nodes(7)...)},
			want: []string{"AddTaint z"}},
		{name: "budget counts the nodes already NotReady: 4 of 10 NotReady, 1 marked, 1 newly dead would leave 6 out: held",
			snap: Snapshot{Now: t0, Nodes: append(append(notReadyNodes(4), nodes(4)...), node("x", true, ours(t0.Add(-time.Hour))), node("y", true)),
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": earlyDead, "y": earlyDead}, nodes(4)...)},
			want:  []string{"HeldBudget y"},
			words: "4 NotReady in the API, 1 more carrying"},
		{name: "budget: a node both NotReady and marked counts once: 3 NotReady (one marked), 1 marked Ready, 1 newly dead is 5 of 10: marked",
			snap: Snapshot{Now: t0, Nodes: append(append(notReadyNodes(2), node("nr-m", false, ours(t0.Add(-time.Hour))), node("x", true, ours(t0.Add(-time.Hour))), node("y", true)), nodes(5)...),
				Verdicts: verdicts(map[string]liveness.NodeVerdict{"nr-m": {Verdict: liveness.Dead, Reason: "NotReady"}, "x": earlyDead, "y": earlyDead}, nodes(5)...)},
			want:  []string{"AddTaint y"},
			words: "5 of at most 5 nodes out"},
		{name: "marked, then NotReady, controller restarted (no verdict yet): the mark stays, it dates the incident",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"b": alive, "c": alive}},
			want: nil},
		{name: "marked, then NotReady, no verdicts at all: the mark stays (upstream's own NoSchedule taint is there)",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true)}},
			want: nil},
		{name: "marked, then NotReady, the verdict leaves Dead (Unknown, Lease still stale): the mark stays",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Unknown, LeaseRenewSeen: t0.Add(-time.Minute), LeaseStale: true}, "b": alive, "c": alive}},
			want: nil},
		{name: "marked, then NotReady, the verdict leaves Dead (CutOffFromAPI by a watcher, Lease still stale): the mark stays",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.CutOffFromAPI, LeaseRenewSeen: t0.Add(-time.Minute), LeaseStale: true}, "b": alive, "c": alive}},
			want: nil},
		{name: "marked, NotReady, controller restarted: its first sight of the Lease counts as a renewal; the mark stays",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Unknown, LeaseRenewSeen: t0.Add(-time.Second)}, "b": alive, "c": alive}},
			want: nil},
		{name: "marked, NotReady, its Lease renewing (the kubelet reports NotReady itself): the mark stays until Ready",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", false, ours(t0.Add(-time.Minute))), node("b", true), node("c", true)},
				Verdicts: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Dead, LeaseRenewSeen: t0.Add(-time.Second)}, "b": alive, "c": alive}},
			want: nil},
		{name: "marked, Ready again, no verdict: taint off at once (fail open)",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true, ours(t0.Add(-time.Minute))), node("b", false)}},
			want: []string{"RemoveTaint a"}},
		{name: "one node alone: half of one is none",
			snap: Snapshot{Nodes: []*corev1.Node{node("a", true)}, Verdicts: map[string]liveness.NodeVerdict{"a": earlyDead}},
			want: []string{"HeldBudget a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.snap.Now.IsZero() {
				tc.snap.Now = t0
			}
			p := PlanFor(tc.snap)
			if got := keys(p); !slices.Equal(got, tc.want) {
				t.Fatalf("plan = %v, want %v", got, tc.want)
			}
			reason := ""
			switch {
			case len(p.Actions) > 0:
				reason = p.Actions[0].Reason
			case len(p.Held) > 0:
				reason = p.Held[0].Reason
			}
			if !strings.Contains(reason, tc.words) {
				t.Errorf("reason %q does not say %q", reason, tc.words)
			}
			if again := PlanFor(tc.snap); !slices.Equal(keys(again), keys(p)) {
				t.Errorf("a second plan of the same snapshot differs: %v", keys(again))
			}
		})
	}
}

// TestPlanRateNextCheck: a held mark is looked at again when the oldest
// mark of the window ages out.
func TestPlanRateNextCheck(t *testing.T) {
	s := Snapshot{Now: t0, Nodes: append(nodes(7), node("x", true, ours(t0.Add(-50*time.Second))), node("y", true, ours(t0.Add(-10*time.Second))), node("z", true)),
		Verdicts: verdicts(map[string]liveness.NodeVerdict{"x": earlyDead, "y": earlyDead, "z": earlyDead}, nodes(7)...)}
	p := PlanFor(s)
	if want := t0.Add(10 * time.Second); !p.NextCheck.Equal(want) {
		t.Errorf("NextCheck = %v, want %v (the mark of 50 s ago leaves the window)", p.NextCheck, want)
	}
	s.Now = p.NextCheck.Add(time.Millisecond)
	if got := keys(PlanFor(s)); !slices.Equal(got, []string{"AddTaint z"}) {
		t.Errorf("after the window moved: %v, want [AddTaint z]", got)
	}
}

func nodes(n int) []*corev1.Node {
	var out []*corev1.Node
	for i := range n {
		out = append(out, node(fmt.Sprintf("n%d", i), true))
	}
	return out
}

func notReadyNodes(n int) []*corev1.Node {
	var out []*corev1.Node
	for i := range n {
		out = append(out, node(fmt.Sprintf("nr%d", i), false))
	}
	return out
}

func verdicts(set map[string]liveness.NodeVerdict, rest ...*corev1.Node) map[string]liveness.NodeVerdict {
	out := map[string]liveness.NodeVerdict{}
	for _, n := range rest {
		out[n.Name] = alive
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}

func TestTaintHelpers(t *testing.T) {
	others := []corev1.Taint{{Key: "a", Effect: corev1.TaintEffectNoSchedule}, {Key: TaintKey, Effect: corev1.TaintEffectNoExecute}, {Key: "b", Effect: corev1.TaintEffectNoExecute}}
	with, changed := WithTaint(others, metav1.NewTime(t0))
	if !changed || len(with) != 4 || !IsTaint(&with[3]) || !with[3].TimeAdded.Equal(&metav1.Time{Time: t0}) || len(others) != 3 {
		t.Fatalf("WithTaint = %v, %v", with, changed)
	}
	if again, changed := WithTaint(with, metav1.NewTime(t0.Add(time.Minute))); changed || !slices.EqualFunc(again, with, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) {
		t.Errorf("WithTaint of a tainted list changed it: %v", again)
	}
	without, changed := WithoutTaint(with)
	if !changed || !slices.EqualFunc(without, others, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) {
		t.Errorf("WithoutTaint = %v, want the other taints in order %v", without, others)
	}
	if _, changed := WithoutTaint(others); changed {
		t.Error("WithoutTaint removed someone else's taint (rebound's key, NoExecute)")
	}
}

// TestPlanEvidenceOfLifeFirst: marking reads the verdict through
// liveness.Rules, evidence of life first: a verdict that says Dead early
// while rebound watches the node's Lease renew marks nothing, and an
// existing mark on the Ready node comes off.
func TestPlanEvidenceOfLifeFirst(t *testing.T) {
	renewing := earlyDead
	renewing.LeaseRenewSeen, renewing.LeaseStaleAt = t0.Add(-time.Second), t0.Add(11*time.Second)
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		want []string
	}{
		{name: "not marked", n: node("a", true), want: nil},
		{name: "its mark comes off", n: node("a", true, ours(t0.Add(-time.Minute))), want: []string{"RemoveTaint a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanFor(Snapshot{Now: t0, Nodes: []*corev1.Node{tc.n, node("b", true), node("c", true)}, Verdicts: map[string]liveness.NodeVerdict{"a": renewing, "b": alive, "c": alive}})
			if got := keys(p); !slices.Equal(got, tc.want) {
				t.Fatalf("plan %v, want %v", got, tc.want)
			}
			for _, a := range p.Actions {
				if !strings.Contains(a.Reason, "kubelet reaches the API") {
					t.Errorf("reason does not name the evidence: %s", a.Reason)
				}
			}
		})
	}
}
