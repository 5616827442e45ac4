package execute

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"rebound/pkg/rescue"
)

// TestDeleteLeaseAttack: attack rows on the executor's Lease re-read.
// Every delete must refuse when the node's kubelet reached the API since
// the plan; rows that fail are defects (see each row's comment).
func TestDeleteLeaseAttack(t *testing.T) {
	planned := time.Date(2026, 3, 1, 11, 59, 40, 0, time.UTC)
	renewed := planned.Add(10 * time.Second)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-x", UID: "p-1"}, Spec: corev1.PodSpec{NodeName: "node-3"}}
	base := rescue.Action{Kind: rescue.ActionDelete, Namespace: "kube-system", Name: "coredns-x", UID: "p-1", Pod: "coredns-x", Node: "node-3"}
	lease := func(renew *time.Time) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "node-3"}}
		if renew != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renew}
		}
		return l
	}
	outOfService := corev1.Taint{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name        string
		action      func() rescue.Action
		objs        []runtime.Object // besides the pod
		leaseGetErr error
		want        string
		detail      string
	}{
		{
			// Was a defect (scope). The plan's cache had no Lease for node-3 (a
			// Lease informer not synced after a restart, or a Lease created
			// after the list), so the action carries no renewTime and the
			// executor reads no Lease; the API has one renewed just now:
			// the kubelet reaches the API, and the pod is deleted anyway.
			name: "plan read no Lease, the API has one renewed since: refused",
			action: func() rescue.Action {
				a := base
				a.LeaseRenewTime = &time.Time{} // the caller read the Leases, none for node-3
				return a
			},
			objs:   []runtime.Object{testNode(false), lease(&renewed)},
			want:   rescue.ResultRefused,
			detail: "renewed",
		},
		{
			name: "force delete on a fenced node, Lease renewed since: refused",
			action: func() rescue.Action {
				a := base
				a.Kind, a.LeaseRenewTime = rescue.ActionForceDelete, &planned
				return a
			},
			objs:   []runtime.Object{testNode(false, outOfService), lease(&renewed)},
			want:   rescue.ResultRefused,
			detail: "was renewed since the plan",
		},
		{
			name: "the plan read a Lease without renewTime, the kubelet has renewed since: refused",
			action: func() rescue.Action {
				a := base
				a.LeaseRenewTime = &time.Time{}
				return a
			},
			objs:   []runtime.Object{testNode(false), lease(&renewed)},
			want:   rescue.ResultRefused,
			detail: "was renewed since the plan",
		},
		{
			name: "the Lease re-read fails: not deleted",
			action: func() rescue.Action {
				a := base
				a.LeaseRenewTime = &planned
				return a
			},
			objs:        []runtime.Object{testNode(false), lease(&planned)},
			leaseGetErr: errors.New("etcdserver: request timed out"),
			want:        rescue.ResultFailed,
			detail:      "re-read the Lease",
		},
		{
			// Was a defect (claim: "every delete re-reads the node's Lease when
			// the plan read one"). The Node object is gone from the API
			// (deleted by hand or by a cloud controller) but its kubelet
			// renews the Lease: a graceful delete skips the Lease re-read.
			// Upstream's pod GC would force-delete there after its
			// quarantine, so this is a broken claim, not worse than
			// upstream.
			name: "node gone from the API, its Lease renewed since the plan: refused",
			action: func() rescue.Action {
				a := base
				a.LeaseRenewTime = &planned
				return a
			},
			objs:   []runtime.Object{lease(&renewed)},
			want:   rescue.ResultRefused,
			detail: "renewed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append([]runtime.Object{pod.DeepCopy()}, tc.objs...)
			client := fake.NewSimpleClientset(objs...)
			if tc.leaseGetErr != nil {
				client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.leaseGetErr
				})
			}
			e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test"}
			o := e.Apply(context.Background(), tc.action())
			_, err := client.CoreV1().Pods("kube-system").Get(context.Background(), "coredns-x", metav1.GetOptions{})
			deleted := err != nil
			if o.Result != tc.want || !strings.Contains(o.Detail, tc.detail) || deleted != (tc.want == rescue.ResultSucceeded) {
				t.Errorf("outcome %s %q, pod deleted=%v; want %s with %q", o.Result, o.Detail, deleted, tc.want, tc.detail)
			}
		})
	}
}
