package execute

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
	"rebound/pkg/unreachable"
)

// TestTwoPlaneDelete: a delete a two-plane verdict decided goes ahead off
// a node the API still has Ready, and is refused the moment anything the
// verdict rested on has changed: the Lease renewed (whatever time its
// kubelet's clock wrote), rebound's mark gone, the verdict no longer
// Dead, no verdict to ask, or no Lease.
func TestTwoPlaneDelete(t *testing.T) {
	renewed := time.Date(2026, 7, 1, 11, 59, 50, 123456000, time.UTC)
	taints, _ := unreachable.WithTaint(nil, metav1.NewTime(t0))
	mark := &taints[0]
	dead := liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: t0.Add(-2 * time.Second)}
	action := rescue.Action{Kind: rescue.ActionDelete, Namespace: "kube-system", Name: "coredns-x", UID: "p-1", ResourceVersion: "3", Node: "node-3",
		TwoPlane: &rescue.TwoPlaneCheck{LeaseRenewTime: renewed, DetectedAt: dead.DetectedAt, MarkedAt: t0}}
	tests := []struct {
		name    string
		taints  []corev1.Taint
		renew   time.Time // zero: no Lease
		verdict *liveness.NodeVerdict
		mutate  func(*rescue.Action)
		want    string
		detail  string
	}{
		{name: "all as the verdict saw it: deleted off a Ready node", taints: []corev1.Taint{*mark}, renew: renewed, verdict: &dead, want: rescue.ResultSucceeded},
		{name: "Lease renewed since, even to an older time (a clock behind)", taints: []corev1.Taint{*mark}, renew: renewed.Add(-time.Hour), verdict: &dead,
			want: rescue.ResultRefused, detail: "was renewed since the verdict"},
		{name: "Lease renewed since", taints: []corev1.Taint{*mark}, renew: renewed.Add(10 * time.Second), verdict: &dead,
			want: rescue.ResultRefused, detail: "its kubelet lives"},
		{name: "mark taken off", renew: renewed, verdict: &dead, want: rescue.ResultRefused, detail: "no longer carries rebound.dev/unreachable"},
		{name: "a gossip watcher has it alive now", taints: []corev1.Taint{*mark}, renew: renewed,
			verdict: &liveness.NodeVerdict{Verdict: liveness.CutOffFromAPI, Reason: "node-1 has it Alive"}, want: rescue.ResultRefused, detail: "node-1 has it Alive"},
		{name: "no verdict to ask", taints: []corev1.Taint{*mark}, renew: renewed, want: rescue.ResultRefused, detail: "no liveness verdict"},
		{name: "no Lease", taints: []corev1.Taint{*mark}, verdict: &dead, want: rescue.ResultRefused, detail: "has no Lease"},
		{name: "without a two-plane check a Ready node refuses as ever", taints: []corev1.Taint{*mark}, renew: renewed, verdict: &dead,
			mutate: func(a *rescue.Action) { a.TwoPlane = nil }, want: rescue.ResultRefused, detail: "is Ready again"},
		{name: "a force delete still needs fencing", taints: []corev1.Taint{*mark}, renew: renewed, verdict: &dead,
			mutate: func(a *rescue.Action) { a.Kind = rescue.ActionForceDelete }, want: rescue.ResultRefused, detail: "is not fenced"},
		{name: "fenced: force-deleted", renew: renewed, verdict: &dead,
			taints: []corev1.Taint{*mark, {Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}},
			mutate: func(a *rescue.Action) { a.Kind = rescue.ActionForceDelete }, want: rescue.ResultSucceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}, Spec: corev1.NodeSpec{Taints: tc.taints},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-x", UID: "p-1", ResourceVersion: "3"}, Spec: corev1.PodSpec{NodeName: "node-3"}},
			}
			if !tc.renew.IsZero() {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "node-3"},
					Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: tc.renew}}})
			}
			client := fake.NewSimpleClientset(objs...)
			e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test", Now: func() time.Time { return t0 }}
			if tc.verdict != nil {
				v := *tc.verdict
				e.Verdict = func(_ context.Context, node string) liveness.NodeVerdict {
					if node != "node-3" {
						t.Errorf("verdict asked for %s", node)
					}
					return v
				}
			}
			a := action
			if tc.mutate != nil {
				tc.mutate(&a)
			}
			o := e.Apply(context.Background(), a)
			if o.Result != tc.want || !strings.Contains(o.Detail, tc.detail) {
				t.Errorf("outcome %+v, want %s with %q", o, tc.want, tc.detail)
			}
		})
	}
}
