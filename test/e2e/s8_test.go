package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/peering"
	"rebound/pkg/unreachable"
)

// TestS8AgentCredentialConfined: deploy/'s RBAC and ValidatingAdmissionPolicy
// on the sandbox's real API server; a token for the agent's
// ServiceAccount, bound to a pod on node-1 as the kubelet would project
// it, writes node-1's PeeringReport and reads the published set, and is
// refused (Forbidden) for node-2's report, any taint, any Node label, and
// ConfigMaps other than the published set.
func TestS8AgentCredentialConfined(t *testing.T) {
	t.Parallel()
	setCtrlLogger.Do(func() { ctrl.SetLogger(logr.Discard()) })
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	res, err := scenario.S8AgentCredential(ctx, c, "node-1", "node-2")
	if err != nil {
		t.Fatal(err)
	}
	// The API server binds the pod's node into the token (feature
	// ServiceAccountTokenPodNodeInfo): the policy's input.
	if res.TokenNode != "node-1" {
		t.Fatalf("the token's %s extra is %q, want node-1: the admission policy cannot confine the agent", scenario.NodeNameExtra, res.TokenNode)
	}
	if res.OwnReport != nil {
		t.Errorf("writing its own node's report: %v, want success", res.OwnReport)
	}
	if res.ReadSet != nil {
		t.Errorf("reading the published set %s by name: %v, want success", peering.DefaultPeerSetName, res.ReadSet)
	}
	if res.AgentPodAdmitted != nil {
		t.Errorf("the agent DaemonSet's pod in its namespace: %v, want admitted", res.AgentPodAdmitted)
	}
	for what, err := range map[string]error{
		"the agent's pod in the restricted controller namespace": res.AgentPodInControllerNamespace,
		"writing node-2's report":                                res.OtherReport,
		"tainting node-2 out-of-service":                         res.TaintOther,
		"changing node-1's in-set label":                         res.LabelOwn,
		"listing every ConfigMap":                                res.ReadAllConfigMaps,
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
	if err := res.AgentPodInControllerNamespace; err == nil || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("the agent's pod in the controller's namespace must be refused by Pod Security: %v", err)
	}
	t.Logf("node-2's report refused: %v", res.OtherReport)
}

// TestS8RejoinCredentialConfined: the Calico backend's rejoin agent may
// write Nodes, so its credential is confined at the API server
// (deploy/agent/rejoin: RBAC and a ValidatingAdmissionPolicy on the node
// name bound into its token). A token of its ServiceAccount bound to a pod
// on node-1 puts node-1 back into the set (in-set false -> true, or the
// label removed) while node-1 is Ready, and is refused (Forbidden) for
// node-2's label, setting its own to false, any other label, annotation,
// taint, cordon or status, deleting a node, and doing it while node-1 is
// NotReady; a token of the same ServiceAccount bound to no pod can do
// nothing at all.
func TestS8RejoinCredentialConfined(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 4*time.Minute)
	res, err := scenario.S8RejoinCredential(ctx, c, "node-1", "node-2")
	if err != nil {
		t.Fatal(err)
	}
	if res.TokenNode != "node-1" {
		t.Fatalf("the token's %s extra is %q, want node-1: the admission policy cannot confine the agent", scenario.NodeNameExtra, res.TokenNode)
	}
	for what, err := range map[string]error{
		"putting node-1 back (false -> true, the agent's own patch)": res.OwnBack,
		"removing node-1's label (false -> none)":                    res.OwnRemoved,
	} {
		if err != nil {
			t.Errorf("%s: %v, want success", what, err)
		}
	}
	// Each refusal by the rule that says why (RBAC grants no status,
	// no delete).
	const (
		ownNode = "patch only the Node its token is bound to"
		onlyUp  = `only change peering.rebound.dev/in-set from "false" to "true"`
		nothing = "change nothing but the label"
		ready   = "only while the Node is Ready"
		rbac    = "cannot"
	)
	for _, tc := range []struct {
		what string
		err  error
		why  string
	}{
		{"putting node-2 back", res.OtherBack, ownNode},
		{"putting node-1 back with an unbound token", res.UnboundTokenPatch, ownNode},
		{"setting node-1's label to false", res.OwnToFalse, onlyUp},
		{"annotating node-1", res.OwnAnnotation, onlyUp},
		{"adding another label with the rejoin", res.OwnBackWithLabel, nothing},
		{"adding a taint with the rejoin", res.OwnBackWithTaint, nothing},
		{"cordoning node-1 with the rejoin", res.OwnCordon, nothing},
		{"putting node-1 back while it is NotReady", res.OwnBackNotReady, ready},
		{"patching node-1's status", res.OwnStatus, rbac},
		{"deleting node-2", res.DeleteOther, rbac},
	} {
		if !apierrors.IsForbidden(tc.err) || !strings.Contains(tc.err.Error(), tc.why) {
			t.Errorf("%s: %v, want Forbidden because it %s", tc.what, tc.err, tc.why)
		}
	}
}

// TestS8GossipCredentialConfined: a gossip member may take rebound's
// leftover taint off its own node (internal/agent/untaint.go), so its
// credential is confined at the API server (deploy/gossip: RBAC and the
// ValidatingAdmissionPolicy rebound-gossip-untaint-own-node on the node
// name bound into its token). A token of its ServiceAccount bound to a pod
// on node-1 takes rebound.dev/unreachable:NoSchedule off node-1 through
// the agent's own writer, every other taint staying, and is refused
// (Forbidden) for: the same removal on node-2, or with a token bound to no
// pod; a taint added to node-1 (another, or rebound's own again);
// another taint removed; a label changed, alone or with the removal; a
// cordon with the removal; node-1's status; deleting node-2.
func TestS8GossipCredentialConfined(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 4*time.Minute)
	res, err := scenario.S8GossipCredential(ctx, c, "node-1", "node-2")
	if err != nil {
		t.Fatal(err)
	}
	if res.TokenNode != "node-1" {
		t.Fatalf("the token's %s extra is %q, want node-1: the admission policy cannot confine the member", scenario.NodeNameExtra, res.TokenNode)
	}
	if res.OwnRemoval != nil {
		t.Errorf("taking rebound's taint off node-1 (the agent's own write): %v, want success", res.OwnRemoval)
	}
	if n := (&corev1.Node{Spec: corev1.NodeSpec{Taints: res.Untouched}}); unreachable.Tainted(n) != nil ||
		!slices.ContainsFunc(res.Untouched, func(t corev1.Taint) bool { return t.Key == "dedicated" && t.Value == "db" }) {
		t.Errorf("node-1's taints after the removal: %v, want rebound's gone and the other one kept", res.Untouched)
	}
	// Each refusal by the rule that says why (RBAC grants no status, no
	// delete).
	const (
		ownNode = "patch only the Node its token is bound to"
		onlyOff = "may only remove the taint rebound.dev/unreachable:NoSchedule"
		nothing = "change nothing but the taint"
		rbac    = "cannot"
	)
	for _, tc := range []struct {
		what string
		err  error
		why  string
	}{
		{"taking the taint off node-2", res.OtherRemoval, ownNode},
		{"taking it off node-1 with an unbound token", res.UnboundTokenRemoval, ownNode},
		{"adding a taint to node-1", res.OwnAddTaint, onlyOff},
		{"putting rebound's taint back on node-1", res.OwnAddOurs, onlyOff},
		{"removing another taint of node-1", res.OwnRemoveOther, onlyOff},
		{"changing a label of node-1", res.OwnLabel, onlyOff},
		{"changing a label with the removal", res.OwnRemovalWithLabel, nothing},
		{"cordoning node-1 with the removal", res.OwnRemovalCordon, nothing},
		{"patching node-1's status", res.OwnStatus, rbac},
		{"deleting node-2", res.DeleteOther, rbac},
	} {
		if !apierrors.IsForbidden(tc.err) || !strings.Contains(tc.err.Error(), tc.why) {
			t.Errorf("%s: %v, want Forbidden because it %s", tc.what, tc.err, tc.why)
		}
	}
	// The apiserver type-checks the policy against the Node schema; a
	// warning is an expression that would fail (and so deny) at run time.
	poll(ctx, t, 30*time.Second, scenario.GossipUntaintPolicy+" type-checked", func() (bool, string) {
		p, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, scenario.GossipUntaintPolicy, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return false, fmt.Sprintf("status %+v", p.Status)
		}
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("%s: %s: %s", scenario.GossipUntaintPolicy, w.FieldRef, w.Warning)
		}
		return true, ""
	})
}

// TestS8LyingAgent: agents claim Established sessions with dead nodes, as
// fresh as the rules allow. Each dead node stays in the set only while
// its liar is Ready and refreshing; it leaves once the lie goes stale, or
// once the liar goes NotReady (while still writing).
func TestS8LyingAgent(t *testing.T) {
	t.Parallel()
	setCtrlLogger.Do(func() { ctrl.SetLogger(logr.Discard()) })
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 6*time.Minute)
	opts := scenario.S8LiarOptions{PruneGrace: 3 * time.Second, ReportMaxAge: 20 * time.Second, Logs: testLogWriter(t)}
	res, err := scenario.S8LyingAgent(ctx, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	config(t, "s8_prune_grace", opts.PruneGrace.Seconds(), "s")
	config(t, "s8_report_max_age", opts.ReportMaxAge.Seconds(), "s")
	metric(t, "s8_liar_stale_to_pruned", res.StaleToPruned.Seconds(), "s")
	metric(t, "s8_liar_notready_to_pruned", res.ReporterNotReadyToPruned.Seconds(), "s")
	if !res.KeptWhileFresh || res.Reason != peering.InSessionUp {
		t.Errorf("while the lie was fresh the dead nodes must stay in (reason %s): kept %v, reason %q", peering.InSessionUp, res.KeptWhileFresh, res.Reason)
	}
	// Stale: the report ages out (max age), then the next pass prunes.
	if res.StaleToPruned < opts.ReportMaxAge-2*time.Second || res.StaleToPruned > opts.ReportMaxAge+20*time.Second {
		t.Errorf("stale lie -> pruned in %v, want about the report max age %v", res.StaleToPruned, opts.ReportMaxAge)
	}
	// NotReady liar: no waiting for the report to age out.
	if res.ReporterNotReadyToPruned > opts.ReportMaxAge/2 {
		t.Errorf("liar NotReady -> pruned in %v, want well under the report max age %v (its report must stop counting at once)", res.ReporterNotReadyToPruned, opts.ReportMaxAge)
	}
}
