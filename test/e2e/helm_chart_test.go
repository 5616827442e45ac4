package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/chartrender"
)

const chartPath = "charts/rebound"

// TestHelmChartInstall: the chart, rendered with Helm's library, applies
// server-side to the sandbox (dry run, then for real), and `rebound
// controller`, run with a kubeconfig holding a token of the chart's
// ServiceAccount (so with exactly the RBAC the chart grants), reconciles
// the chart's default RecoveryPolicy and rescues the critical pod of S1.
func TestHelmChartInstall(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 6*time.Minute)
	cl := newClient(t, c)

	objs := installChart(ctx, t, cl, map[string]any{"namespace": map[string]any{"create": true}})
	if n := len(objs); n < 15 {
		t.Errorf("chart applied %d objects, want the CRD, RBAC, Deployment, PDB, Service, NetworkPolicy, policy...", n)
	}
	// Every optional part the sandbox can serve renders and passes the
	// apiserver's validation (the prometheus-operator kinds have no CRDs
	// here), after the install, whose namespace it needs.
	full, err := chartrender.Render(repoPath(chartPath), chartrender.Options{Values: map[string]any{
		"namespace": map[string]any{"create": true},
		"agent":     map[string]any{"enabled": true},
		"calico":    map[string]any{"enabled": true},
		"gossip":    map[string]any{"enabled": true, "markPodsNotReadyEarly": true},
		"metrics":   map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var namespaces []*unstructured.Unstructured
	for _, o := range full {
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o)
		}
	}
	applyChart(ctx, t, cl, namespaces, false) // the agent's, so that its objects can be dry-run
	applyChart(ctx, t, cl, full, true)
	checkGossipConfinement(ctx, t, c, cl, full)

	kubeconfig := serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound")
	// The later --kubeconfig wins over startController's sandbox identity.
	startController(t, c, "--kubeconfig", kubeconfig)

	// The policy is reconciled with the chart's RBAC (status is a
	// subresource the chart grants).
	poll(ctx, t, time.Minute, "default RecoveryPolicy Ready", func() (bool, string) {
		var pol v1alpha1.RecoveryPolicy
		if err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &pol); err != nil {
			return false, err.Error()
		}
		ok := slices.ContainsFunc(pol.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" && c.Status == metav1.ConditionTrue })
		return ok, "conditions " + condSummary(pol.Status.Conditions)
	})

	const policyTime = 30 * time.Second
	took := rescueS1(ctx, t, c, policyTime)
	metric(t, "helm_chart_s1_recovery", took.Seconds(), "s")
	if took < policyTime-5*time.Second {
		t.Errorf("recovered %s after node-3 NotReady: rebound acted before the chart's policy time %s", took, policyTime)
	}
	if n := len(podDeletesBy(t, c, "system:serviceaccount:rebound-system:rebound")); n != 1 {
		t.Errorf("the chart's ServiceAccount deleted %d pods, want exactly 1 (the critical one)", n)
	}
}

// checkGossipConfinement applies the chart's gossip credential for real
// (not its DaemonSet: the S1 rescue below runs on the same nodes) and
// tries, with a token of it bound to node-0, what a gossip member may and
// may not write: its own node's gossip field, and neither another node's
// report nor the BGP part of its own.
func checkGossipConfinement(ctx context.Context, t *testing.T, c *sandbox.Cluster, cl client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	var confinement []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "gossip" && o.GetKind() != "DaemonSet" {
			confinement = append(confinement, o)
		}
	}
	applyChart(ctx, t, cl, confinement, false)
	token, err := scenario.NodeBoundToken(ctx, c, "rebound-gossip", "rebound-gossip-node-0", "node-0")
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(scenario.TokenConfig(c, token))
	if err != nil {
		t.Fatal(err)
	}
	reports := schema.GroupVersionResource{Group: "rebound.dev", Version: "v1alpha1", Resource: "peeringreports"}
	write := func(node string, bgp bool) error {
		now := time.Now().UTC().Format(time.RFC3339)
		obj := map[string]any{
			"apiVersion": "rebound.dev/v1alpha1", "kind": "PeeringReport", "metadata": map[string]any{"name": node},
			"gossip": map[string]any{"observedAt": now, "members": 1},
		}
		if bgp {
			obj["report"] = map[string]any{"observedAt": now, "established": 1}
		}
		data, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = dyn.Resource(reports).Patch(ctx, node, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "rebound-gossip", Force: ptr.To(true)})
		return err
	}
	deniedByPolicy := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "rebound-gossip-own-report")
	}
	// RBAC and the policy take effect a moment after they are created.
	poll(ctx, t, 30*time.Second, "the gossip member's own report written", func() (bool, string) {
		err := write("node-0", false)
		return err == nil, fmt.Sprint(err)
	})
	poll(ctx, t, 30*time.Second, "another node's report refused by rebound-gossip-own-report", func() (bool, string) {
		err := write("node-1", false)
		return deniedByPolicy(err), fmt.Sprint(err)
	})
	if err := write("node-0", false); err != nil {
		t.Errorf("the gossip member's own gossip: %v", err)
	}
	if err := write("node-0", true); !deniedByPolicy(err) {
		t.Errorf("the gossip member wrote its node's BGP report (err %v), want it refused by rebound-gossip-own-report", err)
	}
}

// installChart renders the chart with values and applies it server-side
// as `helm install` orders it (install.Objects): the CRD and the
// namespace first (the rest needs them), each pass dry-run in full before
// it is stored.
func installChart(ctx context.Context, t *testing.T, cl client.Client, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := chartrender.Render(repoPath(chartPath), chartrender.Options{Values: values})
	if err != nil {
		t.Fatal(err)
	}
	if err := install.Objects(ctx, cl, objs, "helm-e2e"); err != nil {
		t.Fatal(err)
	}
	return objs
}

// applyChart server-side applies rendered objects (install.ApplyObjects;
// dryRun: validated and defaulted by the apiserver, stored nowhere).
// Kinds the apiserver does not serve (prometheus-operator's), and objects
// whose namespace or CRD only the real apply brings, are left out of a
// dry run only.
func applyChart(ctx context.Context, t *testing.T, cl client.Client, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	var apply []*unstructured.Unstructured
	for _, o := range objs {
		if dryRun && o.GetAPIVersion() == "monitoring.coreos.com/v1" {
			continue
		}
		if dryRun && o.GetNamespace() != "" && o.GetKind() != "Namespace" {
			if err := cl.Get(ctx, client.ObjectKey{Name: o.GetNamespace()}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}}); err != nil {
				continue // its namespace comes with the real apply
			}
		}
		if dryRun && o.GetKind() == "RecoveryPolicy" {
			if _, err := cl.RESTMapper().RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version); err != nil {
				continue // the CRD comes with the real apply
			}
		}
		apply = append(apply, o)
	}
	if _, err := install.ApplyObjects(ctx, cl, install.ApplyOptions{FieldManager: "helm-e2e", DryRun: dryRun}, apply); err != nil {
		t.Fatalf("server-side apply (dry run %v): %v", dryRun, err)
	}
}

// serviceAccountToken returns a token of the ServiceAccount (TokenRequest),
// as a pod of it would mount.
func serviceAccountToken(ctx context.Context, t *testing.T, c *sandbox.Cluster, ns, name string) string {
	t.Helper()
	tok, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates with a
// token of the ServiceAccount, so with exactly its RBAC.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, c *sandbox.Cluster, ns, name string) string {
	t.Helper()
	token := serviceAccountToken(ctx, t, c, ns, name)
	var err error
	ca := c.Config.CAData
	if len(ca) == 0 && c.Config.CAFile != "" {
		if ca, err = os.ReadFile(c.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sandbox"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "sandbox", AuthInfo: name, Namespace: ns}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func condSummary(conds []metav1.Condition) string {
	var s string
	for _, c := range conds {
		s += c.Type + "=" + string(c.Status) + "(" + c.Reason + ") "
	}
	return s
}

// rescueS1 plays S1 (the critical stand-in on node-3, node-0 survives)
// with a controller already running under a policy of policyTime, and
// fails the test unless the workload is available again on node-0 within
// policyTime + 45 s of node-3 going NotReady. It returns the recovery
// time from the API's timestamps.
func rescueS1(ctx context.Context, t *testing.T, c *sandbox.Cluster, policyTime time.Duration) time.Duration {
	t.Helper()
	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS1(ctx, c, tl, scenario.S1Options{
		Workload: scenario.CriticalStandIn("node-3"),
		Survivor: "node-0",
		Observe:  policyTime + 45*time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Recovered {
		t.Fatalf("critical Deployment not available on node-0 within %s of node-3 NotReady; final: %+v", policyTime+45*time.Second, res.Final)
	}
	// The API's timestamps, not the observer's: node-3's Ready
	// lastTransitionTime to the replacement pod's.
	return time.Duration(res.Recovery.Seconds * float64(time.Second))
}
