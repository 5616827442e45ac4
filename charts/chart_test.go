// Package charts holds rebound's Helm chart (charts/rebound). Its tests
// lint and render the chart with Helm's Go library and check it installs
// what the kustomize bases under deploy/ install.
package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"rebound/internal/chartrender"
)

const chartDir = "rebound"

// FullValues switches every optional part on.
var FullValues = map[string]any{
	"namespace":     map[string]any{"create": true},
	"agent":         map[string]any{"enabled": true},
	"calico":        map[string]any{"enabled": true, "maxRestartTime": "120s"},
	"networkPolicy": map[string]any{"metricsFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}},
	"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
	},
	"controller": map[string]any{"dryRun": true, "logFormat": "json", "verbosity": 2, "extraArgs": []any{"--unhealthy-zone-threshold=0.6"}},
}

func TestHelmChartLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"default": nil, "full": FullValues} {
		if msgs := chartrender.Lint(chartDir, vals); len(msgs) > 0 {
			t.Errorf("helm lint with %s values:\n  %s", name, strings.Join(msgs, "\n  "))
		}
	}
}

// TestHelmChartRender renders the chart with default and full values and
// checks the objects each installs; every built-in kind decodes strictly.
func TestHelmChartRender(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
		absent []string
	}{{
		name: "default",
		want: []string{
			"CustomResourceDefinition /recoverypolicies.rebound.dev",
			"CustomResourceDefinition /peeringreports.rebound.dev",
			"Deployment rebound-system/rebound-controller",
			"PodDisruptionBudget rebound-system/rebound-controller",
			"Service rebound-system/rebound-controller-metrics",
			"NetworkPolicy rebound-system/rebound-controller",
			"ClusterRole /rebound-metrics-reader",
			"ValidatingAdmissionPolicy /rebound-controller-deployments",
			"ValidatingAdmissionPolicyBinding /rebound-controller-deployments",
			"ValidatingAdmissionPolicy /rebound-controller-nodes",
			"ValidatingAdmissionPolicyBinding /rebound-controller-nodes",
			"ValidatingAdmissionPolicy /rebound-controller-pod-status",
			"ValidatingAdmissionPolicyBinding /rebound-controller-pod-status",
			"RecoveryPolicy /default",
		},
		absent: []string{"Namespace /rebound-system", "DaemonSet rebound-agent/rebound-agent", "ClusterRole /rebound-controller-calico",
			"ServiceMonitor rebound-system/rebound-controller", "PrometheusRule rebound-system/rebound"},
	}, {
		name:   "full",
		values: FullValues,
		want: []string{
			"Namespace /rebound-system",
			"Namespace /rebound-agent",
			"DaemonSet rebound-agent/rebound-agent",
			"ValidatingAdmissionPolicy /rebound-agent-own-report",
			"ClusterRole /rebound-controller-peering",
			"ClusterRole /rebound-controller-calico",
			"ServiceMonitor rebound-system/rebound-controller",
			"Service rebound-agent/rebound-agent-metrics",
			"ServiceMonitor rebound-agent/rebound-agent",
			"ClusterRoleBinding /rebound-agent-metrics-auth",
			"PrometheusRule rebound-system/rebound",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := chartrender.Render(chartDir, chartrender.Options{Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			got := chartrender.Normalize(objs)
			for _, k := range tc.want {
				if got[k] == nil {
					t.Errorf("%s not rendered", k)
				}
			}
			for _, k := range tc.absent {
				if got[k] != nil {
					t.Errorf("%s rendered, want it only when switched on", k)
				}
			}
			decodeStrict(t, objs)
			if tc.name != "full" {
				return
			}
			args := containerArgs(t, got["Deployment rebound-system/rebound-controller"])
			for _, a := range []string{"--peering", "--calico", "--calico-max-restart-time=120s", "--dry-run", "--log-format=json", "--v=2", "--unhealthy-zone-threshold=0.6"} {
				if !strings.Contains(" "+strings.Join(args, " ")+" ", " "+a+" ") {
					t.Errorf("controller args %v lack %s", args, a)
				}
			}
			rule := got["PrometheusRule rebound-system/rebound"]
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			if len(groups) == 0 {
				t.Error("PrometheusRule has no groups")
			}
		})
	}
}

// TestHelmChartMatchesKustomize: every object the kustomize bases install
// is rendered by the chart, identical but for Helm's bookkeeping labels;
// the chart installs nothing the bases do not (with the values that switch
// the same parts on), except the prometheus-operator objects.
func TestHelmChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		bases  []string
	}{
		{"core", map[string]any{"namespace": map[string]any{"create": true}}, []string{"deploy", "deploy/policy"}},
		{"agent", map[string]any{"agent": map[string]any{"enabled": true}}, []string{"deploy/agent"}},
		{"calico", map[string]any{"calico": map[string]any{"enabled": true}}, []string{"deploy/calico"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := chartrender.Render(chartDir, chartrender.Options{Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			chart := chartrender.Normalize(objs)
			want := map[string]*unstructured.Unstructured{}
			for _, b := range tc.bases {
				k, err := chartrender.Kustomize(filepath.Join("..", b))
				if err != nil {
					t.Fatal(err)
				}
				for key, o := range chartrender.Normalize(k) {
					want[key] = o
				}
			}
			for key, w := range want {
				got, ok := chart[key]
				if !ok {
					t.Errorf("%s: in kustomize %v, not rendered by the chart", key, tc.bases)
					continue
				}
				if key == "Deployment rebound-system/rebound-controller" && tc.name != "core" {
					continue // the chart adds --peering/--calico; deploy/agent leaves that to the operator
				}
				if d := cmp.Diff(w.Object, got.Object); d != "" {
					t.Errorf("%s differs (-kustomize +chart):\n%s", key, d)
				}
			}
			if tc.name != "core" {
				return
			}
			for key := range chart {
				if _, ok := want[key]; !ok {
					t.Errorf("%s: rendered by the chart, not in kustomize %v", key, tc.bases)
				}
			}
		})
	}
}

// TestHelmChartFilesInSync: the chart's CRD and alerts are copies of the
// generated CRD and of deploy/monitoring/alerts.yaml (hack/gen.sh copies
// them).
func TestHelmChartFilesInSync(t *testing.T) {
	for copyPath, source := range map[string]string{
		"rebound/crds/rebound.dev_recoverypolicies.yaml": "../deploy/crd/rebound.dev_recoverypolicies.yaml",
		"rebound/crds/rebound.dev_peeringreports.yaml":   "../deploy/crd/rebound.dev_peeringreports.yaml",
		"rebound/files/alerts.yaml":                      "../deploy/monitoring/alerts.yaml",
	} {
		a, err := os.ReadFile(copyPath)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(source)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("charts/%s differs from %s: run hack/gen.sh", copyPath, strings.TrimPrefix(source, "../"))
		}
	}
}

func decodeStrict(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	dec := serializer.NewCodecFactory(clientgoscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	for _, o := range objs {
		if !clientgoscheme.Scheme.Recognizes(o.GroupVersionKind()) {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := dec.Decode(data, nil, nil); err != nil {
			t.Errorf("%s: %v", chartrender.Key(o), err)
		}
	}
}

func containerArgs(t *testing.T, d *unstructured.Unstructured) []string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		t.Fatal("no containers")
	}
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	return args
}
