package restore

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/utils/ptr"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/policyfile"
	"rebound/pkg/rescue"
)

// TestBringupSnapshotSeesTheReports: restore bringup plans on the agents'
// PeeringReports and the Leases, as the controller does. A NotReady node
// with a session a Ready agent reports re-established since the bring-up
// first saw it NotReady is cut off from the API, not dead.
func TestBringupSnapshotSeesTheReports(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	report := kube.ReportToAPI(liveness.Report{Reporter: "node-0", ObservedAt: now.Add(-5 * time.Second),
		Sessions: []liveness.Session{{Peer: "node-1", State: liveness.StateEstablished, Since: now.Add(-10 * time.Second)}}})
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(report)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.PeeringReports: "PeeringReportList"}, &unstructured.Unstructured{Object: obj})
	reports, err := readReports(context.Background(), dyn)
	if err != nil || len(reports) != 1 {
		t.Fatalf("readReports: %v, %v; want node-0's report", reports, err)
	}

	node := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
		}}}
	}
	s := &clusterState{
		nodes:         []*corev1.Node{node("node-0", corev1.ConditionTrue), node("node-1", corev1.ConditionUnknown)},
		heartbeat:     map[string]time.Time{"node-0": now.Add(-2 * time.Second), "node-1": now.Add(-10 * time.Minute)},
		leaseDuration: map[string]time.Duration{"node-0": 40 * time.Second, "node-1": 40 * time.Second},
		reports:       reports,
		namespaces:    map[string]map[string]string{},
	}
	b := &bringup{policy: policyfile.Default()}
	// The bring-up's first look, before the report: its clocks start
	// there, as a restarted controller's do.
	b.snapshot(s, now.Add(-20*time.Second), nil)
	snap := b.snapshot(s, now, nil)
	if v := snap.Verdicts["node-1"]; v.Verdict != liveness.CutOffFromAPI {
		t.Errorf("node-1: %s (%s), want CutOffFromAPI from node-0's report", v.Verdict, v.Reason)
	}
	if v := snap.Verdicts["node-0"]; v.Verdict != liveness.Alive || !v.LeaseRenewSeen.Equal(now.Add(-20*time.Second)) {
		t.Errorf("node-0: %+v, want Alive, its Lease renewal seen at the first look", v)
	}
	if !snap.LeaseRenewTimes["node-1"].Equal(now.Add(-10 * time.Minute)) {
		t.Errorf("LeaseRenewTimes %v, want the Leases' renew times", snap.LeaseRenewTimes)
	}
	if snap.Defaults.ReplacementTimeout == 0 || snap.ZoneConfig.UnhealthyZoneThreshold == 0 {
		t.Errorf("defaults %+v, zone config %+v: want the planner's defaults", snap.Defaults, snap.ZoneConfig)
	}

	// The bring-up plans with the controller's planner: a critical pod on
	// the node node-0 sees alive is held, past maxUnavailableTime (the
	// policy at 0 s; 300 s of tolerations keep upstream away), not
	// deleted.
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-5d4f", UID: "rs-1"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1)}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-5d4f-x1", UID: "p-1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-1", PriorityClassName: "system-cluster-critical", Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	// A third look, a second on, sees node-0's Lease renewed: no stall.
	s.heartbeat["node-0"] = now.Add(time.Second)
	snap = b.snapshot(s, now.Add(time.Second), nil)
	if v := snap.Verdicts["node-1"]; v.Verdict != liveness.CutOffFromAPI || !snap.Verdicts["node-0"].LeaseFresh() {
		t.Fatalf("third look: node-1 %+v, node-0 %+v; want node-1 cut off, node-0's Lease fresh", v, snap.Verdicts["node-0"])
	}
	snap.Pods, snap.ReplicaSets = append(snap.Pods, pod), append(snap.ReplicaSets, rs)
	zero := snap.Policies[0].DeepCopy()
	zero.Spec.MaxUnavailableTime = &metav1.Duration{}
	snap.Policies = []*v1alpha1.RecoveryPolicy{zero}
	plan := rescue.PlanFor(snap)
	if len(plan.Actions) != 0 || len(plan.Critical) != 1 || plan.Critical[0].Decision != rescue.DecisionHeld ||
		!strings.Contains(plan.Critical[0].Reason, "a node seen alive is not stranded") {
		t.Errorf("bring-up plan on a node seen alive: actions %v, critical %+v; want it held, nothing deleted", plan.Actions, plan.Critical)
	}
}
