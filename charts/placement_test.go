package charts

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"rebound/internal/testing/chartrender"
)

// TestHelmChartControllerPlacement: rebound survives what it rescues. By
// default the replicas run on control-plane nodes, never two on one node,
// tolerate node loss for 30 s, and the default RecoveryPolicy covers the
// release namespace; each value that changes that does what it says.
func TestHelmChartControllerPlacement(t *testing.T) {
	const controlPlane = "node-role.kubernetes.io/control-plane"
	for _, tc := range []struct {
		name      string
		namespace string
		values    map[string]any
		// want
		controlPlane bool
		antiAffinity string // required or preferred
		policyNS     []string
	}{
		{name: "default", controlPlane: true, antiAffinity: "required", policyNS: []string{"kube-system", "rebound-system"}},
		{name: "other namespace", namespace: "ops", controlPlane: true, antiAffinity: "required", policyNS: []string{"kube-system", "ops"}},
		{name: "single control-plane node", values: map[string]any{"controller": map[string]any{"podAntiAffinity": "preferred"}},
			controlPlane: true, antiAffinity: "preferred", policyNS: []string{"kube-system", "rebound-system"}},
		{name: "managed cluster", values: map[string]any{"controller": map[string]any{"controlPlane": false}},
			antiAffinity: "required", policyNS: []string{"kube-system", "rebound-system"}},
		{name: "policy without the controller", values: map[string]any{"defaultPolicy": map[string]any{"coverController": false}},
			controlPlane: true, antiAffinity: "required", policyNS: []string{"kube-system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.namespace
			if ns == "" {
				ns = "rebound-system"
			}
			objs, err := chartrender.Render(chartDir, chartrender.Options{Namespace: ns, Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			got := chartrender.Normalize(objs)
			d := deployment(t, got["Deployment "+ns+"/rebound-controller"])
			spec := d.Spec.Template.Spec

			hasNodeAffinity := spec.Affinity.NodeAffinity != nil && spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil &&
				strings.Contains(spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.String(), "Key:"+controlPlane+",Operator:Exists")
			tolerated := false
			for _, tol := range spec.Tolerations {
				if tol.Key == controlPlane && tol.Effect == corev1.TaintEffectNoSchedule {
					tolerated = true
				}
			}
			if hasNodeAffinity != tc.controlPlane || tolerated != tc.controlPlane {
				t.Errorf("control-plane node affinity %v, toleration %v; want both %v", hasNodeAffinity, tolerated, tc.controlPlane)
			}
			for _, key := range []string{"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} {
				found := false
				for _, tol := range spec.Tolerations {
					if tol.Key == key && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil && *tol.TolerationSeconds == 30 {
						found = true
					}
				}
				if !found {
					t.Errorf("no 30 s toleration of %s: %+v", key, spec.Tolerations)
				}
			}
			anti := spec.Affinity.PodAntiAffinity
			required, preferred := len(anti.RequiredDuringSchedulingIgnoredDuringExecution), len(anti.PreferredDuringSchedulingIgnoredDuringExecution)
			if (tc.antiAffinity == "required") != (required == 1 && preferred == 0) || (tc.antiAffinity == "preferred") != (preferred == 1 && required == 0) {
				t.Errorf("pod anti-affinity: %d required, %d preferred terms; want %s", required, preferred, tc.antiAffinity)
			}
			if spec.PriorityClassName != "system-cluster-critical" {
				t.Errorf("priorityClassName = %q", spec.PriorityClassName)
			}

			nsList, _, _ := unstructured.NestedStringSlice(got["RecoveryPolicy /default"].Object, "spec", "critical", "namespaces")
			if strings.Join(nsList, ",") != strings.Join(tc.policyNS, ",") {
				t.Errorf("default policy namespaces = %v, want %v", nsList, tc.policyNS)
			}
		})
	}
	if _, err := chartrender.Render(chartDir, chartrender.Options{Values: map[string]any{"controller": map[string]any{"podAntiAffinity": "sometimes"}}}); err == nil ||
		!strings.Contains(err.Error(), "controller.podAntiAffinity") {
		t.Errorf("podAntiAffinity=sometimes rendered (%v), want an error naming the value", err)
	}
}

// TestHelmChartRejoinAgent: the Calico backend brings its rejoin agent,
// with the agents' namespace, unless switched off; the BIRD agent's
// objects stay out.
func TestHelmChartRejoinAgent(t *testing.T) {
	rejoin := []string{
		"Namespace /rebound-agent",
		"ServiceAccount rebound-agent/rebound-rejoin",
		"ClusterRole /rebound-rejoin",
		"ClusterRoleBinding /rebound-rejoin",
		"ValidatingAdmissionPolicy /rebound-rejoin-own-node",
		"ValidatingAdmissionPolicyBinding /rebound-rejoin-own-node",
		"DaemonSet rebound-agent/rebound-rejoin",
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   bool
	}{
		{"calico", map[string]any{"calico": map[string]any{"enabled": true}}, true},
		{"calico without rejoin", map[string]any{"calico": map[string]any{"enabled": true, "rejoin": map[string]any{"enabled": false}}}, false},
		{"no calico", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := chartrender.Render(chartDir, chartrender.Options{Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			got := chartrender.Normalize(objs)
			for _, k := range rejoin {
				if (got[k] != nil) != tc.want {
					t.Errorf("%s rendered: %v, want %v", k, got[k] != nil, tc.want)
				}
			}
			if got["DaemonSet rebound-agent/rebound-agent"] != nil {
				t.Error("the BIRD agent rendered without agent.enabled")
			}
			if !tc.want {
				return
			}
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got["DaemonSet rebound-agent/rebound-rejoin"].Object, &ds); err != nil {
				t.Fatal(err)
			}
			spec := ds.Spec.Template.Spec
			args := strings.Join(spec.Containers[0].Args, " ")
			if !spec.HostNetwork || !strings.Contains(args, "--rejoin-only") || spec.ServiceAccountName != "rebound-rejoin" {
				t.Errorf("rejoin DaemonSet: hostNetwork %v, args %q, serviceAccount %q", spec.HostNetwork, args, spec.ServiceAccountName)
			}
			if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Error("the rejoin agent must not run as root")
			}
		})
	}
}

func deployment(t *testing.T, u *unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	if u == nil {
		t.Fatal("controller Deployment not rendered")
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
		t.Fatal("controller Deployment has no pod anti-affinity")
	}
	return &d
}
