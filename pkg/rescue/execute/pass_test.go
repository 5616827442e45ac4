package execute

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
)

// A pass's deletes off one node share one read of the node, its Lease and
// its verdict, and each delete is still checked against them: a node
// Ready in that read refuses every delete off it, and a Lease renewed
// since the plan refuses those that planned the older renewal.
func TestPassReadsEachNodeOnce(t *testing.T) {
	renew := t0.Add(-time.Minute)
	node := func(name string, ready corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	lease := func(name string, at time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: at}}}
	}
	keepsOff := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	objs := []runtime.Object{
		node("dead", corev1.ConditionUnknown, keepsOff), lease("dead", renew),
		node("back", corev1.ConditionTrue), lease("back", renew),
		node("renewed", corev1.ConditionUnknown, keepsOff), lease("renewed", t0),
	}
	var actions []rescue.Action
	for _, n := range []string{"dead", "back", "renewed"} {
		for i := range 6 {
			name := fmt.Sprintf("%s-%d", n, i)
			objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: n}})
			planned := renew
			actions = append(actions, rescue.Action{Kind: rescue.ActionDelete, Namespace: "ns", Name: name, Pod: name, Node: n, UID: types.UID("uid-" + name),
				LeaseRenewTime: &planned, KeepsOff: &keepsOff})
		}
	}
	// The Lease of the Ready node is read beside it but nobody waits for
	// it, so it may or may not be counted yet: the two NotReady nodes'
	// Leases must be.
	for _, tc := range []struct {
		name                        string
		pass                        bool
		nodeGets, minLeases, leases int
	}{
		{name: "one pass: each node and Lease read once", pass: true, nodeGets: 3, minLeases: 2, leases: 3},
		{name: "no pass: read once per delete", pass: false, nodeGets: 18, minLeases: 12, leases: 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(objs...)
			e := &Executor{Client: client, Component: "rebound.dev/test", Now: func() time.Time { return t0 }}
			if tc.pass {
				e = e.Pass()
			}
			out := make([]Outcome, len(actions))
			var wg sync.WaitGroup
			for i := range actions {
				wg.Add(1)
				go func() { defer wg.Done(); out[i] = e.Apply(context.Background(), actions[i]) }()
			}
			wg.Wait()
			for i, a := range actions {
				want := rescue.ResultRefused
				if a.Node == "dead" {
					want = rescue.ResultSucceeded
				}
				if out[i].Result != want {
					t.Errorf("%s off %s: %s (%s), want %s", a.Name, a.Node, out[i].Result, out[i].Detail, want)
				}
			}
			counts := map[string]int{}
			for _, act := range client.Actions() {
				if g, ok := act.(k8stesting.GetAction); ok && act.GetVerb() == "get" {
					counts[g.GetResource().Resource]++
				}
			}
			if counts["nodes"] != tc.nodeGets || counts["leases"] < tc.minLeases || counts["leases"] > tc.leases {
				t.Errorf("%d node and %d Lease reads, want %d and %d to %d", counts["nodes"], counts["leases"], tc.nodeGets, tc.minLeases, tc.leases)
			}
		})
	}
}

// A two-plane delete asks the verdict once per node in a pass, and a
// verdict that is no longer Dead refuses every delete off the node.
func TestPassAsksTheVerdictOncePerNode(t *testing.T) {
	renew := t0.Add(-time.Minute)
	mark := corev1.Taint{Key: "rebound.dev/unreachable", Effect: corev1.TaintEffectNoSchedule}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{mark}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "n"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}}}
	for _, dead := range []bool{true, false} {
		t.Run(fmt.Sprintf("dead=%v", dead), func(t *testing.T) {
			objs := []runtime.Object{n, l}
			var actions []rescue.Action
			for i := range 5 {
				name := fmt.Sprintf("p-%d", i)
				objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: "n"}})
				actions = append(actions, rescue.Action{Kind: rescue.ActionDelete, Namespace: "ns", Name: name, Pod: name, Node: "n",
					TwoPlane: &rescue.TwoPlaneCheck{LeaseRenewTime: renew}})
			}
			var mu sync.Mutex
			asked := 0
			e := (&Executor{Client: fake.NewSimpleClientset(objs...), Component: "rebound.dev/test", Now: func() time.Time { return t0 },
				Verdict: func(context.Context, string) liveness.NodeVerdict {
					mu.Lock()
					asked++
					mu.Unlock()
					if dead {
						return liveness.NodeVerdict{Verdict: liveness.Dead, DetectedAt: t0}
					}
					return liveness.NodeVerdict{Verdict: liveness.Alive}
				}}).Pass()
			var wg sync.WaitGroup
			out := make([]Outcome, len(actions))
			for i := range actions {
				wg.Add(1)
				go func() { defer wg.Done(); out[i] = e.Apply(context.Background(), actions[i]) }()
			}
			wg.Wait()
			if asked != 1 {
				t.Errorf("the verdict was asked %d times for one node in one pass, want 1", asked)
			}
			for i, o := range out {
				if o.Applied() != dead {
					t.Errorf("%s: %s (%s) with the node dead=%v", actions[i].Name, o.Result, o.Detail, dead)
				}
			}
		})
	}
}

// A node read that fails fails every delete of the pass off that node
// (none is applied on a read that did not happen), and the next pass reads
// again: a shared read never outlives its pass.
func TestPassSharedReadFailureFailsTheNodesDeletes(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	objs := []runtime.Object{n}
	var actions []rescue.Action
	for i := range 3 {
		name := fmt.Sprintf("p-%d", i)
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: "n"}})
		actions = append(actions, rescue.Action{Kind: rescue.ActionDelete, Namespace: "ns", Name: name, Pod: name, Node: "n"})
	}
	client := fake.NewSimpleClientset(objs...)
	failing := true
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, fmt.Errorf("apiserver unavailable")
		}
		return false, nil, nil
	})
	base := &Executor{Client: client, Component: "rebound.dev/test", Now: func() time.Time { return t0 }}
	e := base.Pass()
	for _, a := range actions {
		if o := e.Apply(context.Background(), a); o.Result != rescue.ResultFailed || o.Applied() {
			t.Errorf("%s with the node read failing: %s (%s), want Failed", a.Name, o.Result, o.Detail)
		}
	}
	failing = false
	e = base.Pass()
	for _, a := range actions {
		if o := e.Apply(context.Background(), a); !o.Applied() {
			t.Errorf("%s in the next pass: %s (%s), want deleted", a.Name, o.Result, o.Detail)
		}
	}
}
