package rescue

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
)

// TestDeletedBy: who deleted a Terminating pod is what the deleter's own
// records say: rebound's Events and status.lastActions, or
// kube-controller-manager's taint with the pod's toleration; a
// DisruptionTarget condition alone names nobody.
func TestDeletedBy(t *testing.T) {
	// The pod was created an hour before t0 and its deletion requested
	// at t0+31s (deletionTimestamp t0+61s, grace 30 s).
	terminating := func(tolerate int64, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "web-0", UID: "uid-web-0",
				CreationTimestamp: metav1.NewTime(at(-time.Hour)), DeletionTimestamp: &metav1.Time{Time: at(61 * time.Second)},
				DeletionGracePeriodSeconds: &[]int64{30}[0]},
			Spec: corev1.PodSpec{NodeName: "node-3", Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable,
				Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolerate}}},
			Status: corev1.PodStatus{Conditions: conds},
		}
	}
	byTaintManager := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"}
	byPodGC := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC"}
	node := func(taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	record := func(at time.Time, uid string) DeleteRecord {
		return DeleteRecord{Namespace: "kube-system", Pod: "web-0", UID: types.UID("uid-" + uid), At: at, Source: "Event StrandedPodDeleted"}
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		node    *corev1.Node
		records []DeleteRecord
		want    Deleter
		words   string
	}{
		{name: "rebound's Event names the pod: rebound, though the taint manager's condition came later",
			pod: terminating(300, byTaintManager), node: node(noExecute(corev1.TaintNodeUnreachable, t0)),
			records: []DeleteRecord{record(at(31*time.Second), "web-0")}, want: DeletedByRebound, words: "Event StrandedPodDeleted at 2026-03-01T12:00:31Z"},
		{name: "an Event about another pod of that name (another UID): not rebound",
			pod: terminating(300), node: node(), records: []DeleteRecord{record(at(31*time.Second), "web-0-old")}, want: DeletedByOther},
		{name: "a record older than the pod (an earlier incarnation's): not rebound",
			pod: terminating(300), node: node(), records: []DeleteRecord{{Namespace: "kube-system", Pod: "web-0", At: at(-2 * time.Hour)}}, want: DeletedByOther},
		{name: "the taint and the toleration made the eviction due before the request: taint eviction",
			pod: terminating(20), node: node(noExecute(corev1.TaintNodeUnreachable, t0)), want: DeletedByTaintEviction,
			words: "node tainted node.kubernetes.io/unreachable:NoExecute at 2026-03-01T12:00:00Z and the pod tolerates it for 20s, so the eviction was due at 2026-03-01T12:00:20Z"},
		{name: "the condition, but the toleration had not run out by the request: not claimed for upstream",
			pod: terminating(300, byTaintManager), node: node(noExecute(corev1.TaintNodeUnreachable, t0)), want: DeletedByOther,
			words: "the condition is also set on a pod already Terminating"},
		{name: "the condition and no taint at all: not claimed for upstream",
			pod: terminating(0, byTaintManager), node: node(), want: DeletedByOther},
		{name: "a taint without timeAdded proves no time: not claimed",
			pod: terminating(0), node: node(corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}), want: DeletedByOther},
		{name: "pod GC's condition on a fenced node: pod GC",
			pod:  terminating(300, byPodGC),
			node: node(corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}), want: DeletedByPodGC},
		{name: "pod GC's condition on a node not fenced: not claimed",
			pod: terminating(300, byPodGC), node: node(), want: DeletedByOther},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := DeletedBy(tc.pod, tc.node, tc.records)
			if d.By != tc.want || !d.RequestedAt.Equal(at(31*time.Second)) {
				t.Errorf("DeletedBy = %+v, want %s requested at t0+31s", d, tc.want)
			}
			if !strings.Contains(d.Evidence, tc.words) || d.Evidence == "" {
				t.Errorf("evidence %q lacks %q", d.Evidence, tc.words)
			}
		})
	}
}

// TestDeleteRecords: only succeeded, real deletes are rebound's records.
func TestDeleteRecords(t *testing.T) {
	p := &v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	rec := func(action v1alpha1.RecordedAction, dry bool, result, pod string) v1alpha1.ActionRecord {
		return v1alpha1.ActionRecord{Time: metav1.NewTime(t0), Action: action, Pod: pod, DryRun: dry, Result: result}
	}
	p.Status.LastActions = []v1alpha1.ActionRecord{
		rec(v1alpha1.RecordedDeleteAndReplace, false, ResultSucceeded, "kube-system/a"),
		rec(v1alpha1.RecordedForceDelete, false, ResultSucceeded, "kube-system/b"),
		rec(v1alpha1.RecordedDeleteAndReplace, true, ResultSucceeded, "kube-system/c"),
		rec(v1alpha1.RecordedDeleteAndReplace, false, ResultAlreadyDone, "kube-system/d"),
		rec(v1alpha1.RecordedScaleBounce, false, ResultSucceeded, "kube-system/e"),
		rec(v1alpha1.RecordedDeleteAndReplace, false, ResultSucceeded, "no-slash"),
	}
	got := DeleteRecords([]*v1alpha1.RecoveryPolicy{p, nil})
	if len(got) != 2 || got[0].Pod != "a" || got[1].Pod != "b" || got[1].Namespace != "kube-system" ||
		got[1].Source != "RecoveryPolicy default status.lastActions (ForceDelete)" {
		t.Errorf("records = %+v", got)
	}
}
