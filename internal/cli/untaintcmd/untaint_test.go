package untaintcmd

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"rebound/pkg/unreachable"
)

func testNode(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}, Spec: corev1.NodeSpec{Taints: taints}}
}

var (
	ours   = corev1.Taint{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}}
	theirs = corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	// rebound's key with another effect is someone else's.
	lookalike = corev1.Taint{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoExecute}
)

// TestRun: every node that carries rebound's taint loses it and nothing
// else; the others are not written; --dry-run writes nothing; a node
// named but missing fails.
func TestRun(t *testing.T) {
	objs := func() []runtime.Object {
		return []runtime.Object{testNode("a", theirs, ours), testNode("b", lookalike), testNode("c", ours), testNode("d")}
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		removed []string
		failed  []string
		patched []string
	}{
		{name: "every node", removed: []string{"a", "c"}, patched: []string{"a", "c"}},
		{name: "dry run", opts: Options{DryRun: true}, removed: []string{"a", "c"}},
		{name: "named nodes, one without the taint, one missing", opts: Options{Nodes: []string{"c", "d", "x"}}, removed: []string{"c"}, failed: []string{"x"}, patched: []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(objs()...)
			res, err := Run(context.Background(), cs, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Removed, tc.removed) {
				t.Errorf("removed %v, want %v", res.Removed, tc.removed)
			}
			var failed []string
			for n := range res.Failed {
				failed = append(failed, n)
			}
			if slices.Sort(failed); !slices.Equal(failed, tc.failed) {
				t.Errorf("failed %v, want %v", res.Failed, tc.failed)
			}
			var patched []string
			for _, a := range cs.Actions() {
				if p, ok := a.(k8stesting.PatchAction); ok {
					patched = append(patched, p.GetName())
				}
			}
			if !slices.Equal(patched, tc.patched) {
				t.Errorf("patched %v, want %v", patched, tc.patched)
			}
			want := map[string][]corev1.Taint{"a": {theirs, ours}, "b": {lookalike}, "c": {ours}, "d": nil}
			if !tc.opts.DryRun {
				for _, n := range tc.removed {
					want[n], _ = unreachable.WithoutTaint(want[n])
				}
			}
			for name, taints := range want {
				n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(n.Spec.Taints) != len(taints) || !slices.EqualFunc(n.Spec.Taints, taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) {
					t.Errorf("node %s taints %v, want %v", name, n.Spec.Taints, taints)
				}
			}
		})
	}
}
