package e2e

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/sandbox"
	"rebound/internal/scenario"
)

const defaultPolicyFile = "deploy/policy/default-recoverypolicy.yaml"

// TestS1WithReboundCriticalPodAvailableOnSurvivor: S1 as in
// TestS1WithoutReboundPodStaysOnDeadNode, with `rebound controller` running
// under the default RecoveryPolicy (maxUnavailableTime 30 s) and the RBAC
// of deploy/. The critical Deployment must be Available on node-0 within
// 30 s + 15 s of node-3 being marked NotReady, while the zone is still in
// PartialDisruption; a non-critical Deployment on node-3 stays where it is.
func TestS1WithReboundCriticalPodAvailableOnSurvivor(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 6*time.Minute)
	cl := installRebound(ctx, t, c, repoPath(defaultPolicyFile))
	startController(t, c)

	plain := scenario.Workload{Namespace: "default", Name: "not-critical", PreferNode: "node-3"}
	if err := plain.Create(ctx, c.Client); err != nil {
		t.Fatal(err)
	}
	const policyTime = 30 * time.Second
	res, took := rescueS1(ctx, t, c, policyTime)
	metric(t, "s1_with_rebound_available_after_notready", took.Seconds(), "s")
	if took > policyTime+15*time.Second {
		t.Errorf("recovered %s after node-3 NotReady, want within maxUnavailableTime %s + 15s", took, policyTime)
	}
	if took < policyTime-5*time.Second {
		t.Errorf("recovered %s after node-3 NotReady: rebound acted before maxUnavailableTime %s", took, policyTime)
	}
	if z := res.Final.Zones["sandbox/zone-a"]; z != "PartialDisruption" {
		t.Errorf("zone = %q at recovery, want PartialDisruption still (rebound must not need the zone to heal)", z)
	}

	// The non-critical Deployment's pod is untouched on node-3.
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=not-critical"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "node-3" || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("non-critical pods = %v, want one untouched pod on node-3", podSummaries(pods.Items))
	}
	if n := len(podDeletesBy(t, c, sandbox.ReboundUser)); n != 1 {
		t.Errorf("rebound deleted %d pods, want exactly 1 (the critical one)", n)
	}

	// The policy's status records the action.
	var pol v1alpha1.RecoveryPolicy
	if err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Status.RescuesTotal != 1 || len(pol.Status.LastActions) != 1 || pol.Status.LastActions[0].Action != v1alpha1.RecordedDeleteAndReplace {
		t.Errorf("policy status = %+v, want one DeleteAndReplace recorded", pol.Status)
	}
	if !slices.ContainsFunc(pol.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" && c.Status == metav1.ConditionTrue }) {
		t.Errorf("policy conditions = %+v, want Ready=True", pol.Status.Conditions)
	}
}
