// Package charts holds rebound's Helm chart (charts/rebound). Its tests
// lint and render the chart with Helm's Go library and check it installs
// what the kustomize bases under deploy/ install.
package charts

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"rebound/internal/testing/chartrender"
	"rebound/pkg/liveness"
)

const chartDir = "rebound"

// FullValues switches every optional part on.
var FullValues = map[string]any{
	"namespace":     map[string]any{"create": true},
	"agent":         map[string]any{"enabled": true},
	"calico":        map[string]any{"enabled": true, "maxRestartTime": "120s", "apiGroup": "projectcalico.org/v3"},
	"networkPolicy": map[string]any{"metricsFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}},
	"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
	},
	"controller": map[string]any{"dryRun": true, "logFormat": "json", "verbosity": 2, "extraArgs": []any{"--unhealthy-zone-threshold=0.6"}},
	"gossip":     map[string]any{"enabled": true, "markPodsNotReadyEarly": true},
}

// gossipObjects are what gossip.enabled installs besides the agents'
// namespace and the controller's --lease-plane.
var gossipObjects = []string{
	"ServiceAccount rebound-agent/rebound-gossip",
	"ClusterRole /rebound-gossip",
	"ClusterRoleBinding /rebound-gossip",
	"Role kube-node-lease/rebound-gossip-node-lease",
	"RoleBinding kube-node-lease/rebound-gossip-node-lease",
	"ValidatingAdmissionPolicy /rebound-gossip-own-report",
	"ValidatingAdmissionPolicyBinding /rebound-gossip-own-report",
	"ValidatingAdmissionPolicy /rebound-gossip-untaint-own-node",
	"ValidatingAdmissionPolicyBinding /rebound-gossip-untaint-own-node",
	"Service rebound-agent/rebound-gossip",
	"NetworkPolicy rebound-agent/rebound-gossip",
	"DaemonSet rebound-agent/rebound-gossip",
}

// fencingValues turn the gossip plane on with watchdog self-fencing.
var fencingValues = map[string]any{"gossip": map[string]any{"enabled": true, "fencing": map[string]any{"watchdogDevice": "/dev/watchdog0"}}}

// fencingObjects are what gossip.fencing.watchdogDevice adds to the gossip
// plane (deploy/fencing).
var fencingObjects = []string{
	"ClusterRole /rebound-gossip-fencing",
	"ClusterRoleBinding /rebound-gossip-fencing",
	"Role kube-node-lease/rebound-gossip-fencing-lease",
	"RoleBinding kube-node-lease/rebound-gossip-fencing-lease",
	"Role rebound-system/rebound-gossip-fencing-document",
	"RoleBinding rebound-system/rebound-gossip-fencing-document",
}

func TestHelmChartLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"default": nil, "full": FullValues, "fencing": fencingValues} {
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
		absent: slices.Concat([]string{"Namespace /rebound-system", "DaemonSet rebound-agent/rebound-agent", "ClusterRole /rebound-controller-calico",
			"ServiceMonitor rebound-system/rebound-controller", "PrometheusRule rebound-system/rebound", "Secret rebound-agent/rebound-gossip-key"}, gossipObjects, fencingObjects),
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
			"DaemonSet rebound-agent/rebound-gossip",
		},
	}, {
		// Gossip alone: the agents' namespace for its DaemonSet, and the
		// key the chart makes.
		name:   "gossip",
		values: map[string]any{"gossip": map[string]any{"enabled": true}},
		want:   append([]string{"Namespace /rebound-agent", "Secret rebound-agent/rebound-gossip-key"}, gossipObjects...),
		absent: append([]string{"DaemonSet rebound-agent/rebound-agent", "ValidatingAdmissionPolicy /rebound-agent-own-report", "ClusterRole /rebound-controller-peering"}, fencingObjects...),
	}, {
		name:   "gossip with fencing",
		values: fencingValues,
		want:   slices.Concat([]string{"Namespace /rebound-agent"}, gossipObjects, fencingObjects),
	}, {
		name:   "gossip with an existing key",
		values: map[string]any{"gossip": map[string]any{"enabled": true, "existingSecret": "my-gossip-key"}},
		want:   append([]string{"Namespace /rebound-agent"}, gossipObjects...),
		absent: []string{"Secret rebound-agent/rebound-gossip-key"},
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
			args := " " + strings.Join(containerArgs(t, got["Deployment rebound-system/rebound-controller"]), " ") + " "
			var want, unwanted []string
			switch tc.name {
			case "default":
				unwanted = []string{"--lease-plane", "--mark-pods-not-ready-early", "--calico-api-group=auto"}
			case "full":
				want = []string{"--peering", "--calico", "--calico-max-restart-time=120s", "--calico-api-group=projectcalico.org/v3", "--dry-run", "--log-format=json", "--v=2", "--unhealthy-zone-threshold=0.6",
					"--lease-plane", "--mark-pods-not-ready-early"}
			default: // gossip
				want, unwanted = []string{"--lease-plane"}, []string{"--mark-pods-not-ready-early", "--peering"}
			}
			for _, a := range want {
				if !strings.Contains(args, " "+a+" ") {
					t.Errorf("controller args %s lack %s", args, a)
				}
			}
			for _, a := range unwanted {
				if strings.Contains(args, " "+a+" ") {
					t.Errorf("controller args %s have %s", args, a)
				}
			}
			if tc.name != "full" {
				return
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
		{"gossip", map[string]any{"gossip": map[string]any{"enabled": true}}, []string{"deploy/gossip"}},
		{"fencing", fencingValues, []string{"deploy/gossip", "deploy/fencing"}},
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
					continue // the chart adds --peering/--calico/--lease-plane; deploy/agent and deploy/gossip leave that to the operator
				}
				if key == "DaemonSet rebound-agent/rebound-gossip" && tc.name == "fencing" {
					continue // deploy/fencing leaves the device, the state and the privilege to an overlay; TestHelmChartFencing checks the chart's
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

// TestHelmChartGossip: the gossip DaemonSet runs unprivileged in the pod
// network on every node, joins through its headless Service and reads the
// key from the Secret the values name; the chart's own key survives an
// upgrade; values the controller cannot honour fail the render.
func TestHelmChartGossip(t *testing.T) {
	t.Run("daemonset", func(t *testing.T) {
		objs, err := chartrender.Render(chartDir, chartrender.Options{Values: map[string]any{
			"gossip": map[string]any{"enabled": true, "port": 7950, "existingSecret": "my-gossip-key"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		got := chartrender.Normalize(objs)
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got["DaemonSet rebound-agent/rebound-gossip"].Object, &ds); err != nil {
			t.Fatal(err)
		}
		spec := ds.Spec.Template.Spec
		if spec.HostNetwork {
			t.Error("the gossip members must run in the pod network")
		}
		if spec.ServiceAccountName != "rebound-gossip" || spec.PriorityClassName != "system-node-critical" {
			t.Errorf("serviceAccount %q, priorityClass %q; want rebound-gossip, system-node-critical", spec.ServiceAccountName, spec.PriorityClassName)
		}
		if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
			t.Errorf("tolerations %+v: want every taint tolerated", spec.Tolerations)
		}
		c := spec.Containers[0]
		args := " " + strings.Join(c.Args, " ") + " "
		for _, a := range []string{"agent", "--gossip-only", "--node-name=$(NODE_NAME)", "--gossip-bind-address=$(POD_IP)", "--gossip-port=7950",
			"--gossip-key-file=/etc/rebound/gossip/key", "--gossip-join=rebound-gossip.rebound-agent.svc:7950", "--gossip-watchers=3"} {
			if !strings.Contains(args, " "+a+" ") {
				t.Errorf("gossip args %s lack %s", args, a)
			}
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if env["POD_IP"] != "status.podIP" || env["NODE_NAME"] != "spec.nodeName" {
			t.Errorf("env %v: want POD_IP from status.podIP and NODE_NAME from spec.nodeName", env)
		}
		psc, sc := spec.SecurityContext, c.SecurityContext
		switch {
		case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0:
			t.Error("the gossip members must not run as root")
		case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Error("pod seccompProfile must be RuntimeDefault")
		case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Error("readOnlyRootFilesystem must be true")
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Error("allowPrivilegeEscalation must be false")
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Error("capabilities must drop ALL and add none")
		}
		if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "my-gossip-key" {
			t.Errorf("volumes %+v: want the key from Secret my-gossip-key", spec.Volumes)
		}

		var svc corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got["Service rebound-agent/rebound-gossip"].Object, &svc); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses || !maps.Equal(svc.Spec.Selector, ds.Spec.Template.Labels) {
			t.Errorf("Service rebound-gossip: clusterIP %q, publishNotReadyAddresses %v, selector %v; want headless, true, the DaemonSet's pods %v",
				svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses, svc.Spec.Selector, ds.Spec.Template.Labels)
		}
		var np networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got["NetworkPolicy rebound-agent/rebound-gossip"].Object, &np); err != nil {
			t.Fatal(err)
		}
		members := labels.SelectorFromSet(ds.Spec.Template.Labels)
		if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			t.Errorf("NetworkPolicy podSelector %v does not select the members", np.Spec.PodSelector)
		}
		if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].NamespaceSelector != nil {
			t.Fatalf("NetworkPolicy ingress %+v: want one rule, from the members in their namespace", np.Spec.Ingress)
		}
		rule := np.Spec.Ingress[0]
		if from, err := metav1.LabelSelectorAsSelector(rule.From[0].PodSelector); err != nil || from.String() != members.String() {
			t.Errorf("NetworkPolicy admits pods %v, want the members (%s)", rule.From[0].PodSelector, members)
		}
		var ports []string
		for _, p := range rule.Ports {
			ports = append(ports, string(*p.Protocol)+"/"+p.Port.String())
		}
		// The gossip port, and the fencing probes' (agent --fencing-port).
		if !slices.Equal(ports, []string{"TCP/7950", "UDP/7950", "UDP/7947"}) {
			t.Errorf("NetworkPolicy admits %v, want TCP/7950, UDP/7950 and the fencing probes' UDP/7947 only", ports)
		}
	})

	t.Run("key kept on upgrade", func(t *testing.T) {
		values := map[string]any{"gossip": map[string]any{"enabled": true}}
		first := gossipKey(t, renderAgainst(t, values, nil))
		raw, err := base64.StdEncoding.DecodeString(first)
		if err != nil || len(raw) != 32 {
			t.Fatalf("the chart's key file %q: want base64 of 32 bytes (%v, %d bytes)", first, err, len(raw))
		}
		if again := gossipKey(t, renderAgainst(t, values, nil)); again == first {
			t.Error("two installs made the same key")
		}
		stored := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "rebound-gossip-key", "namespace": "rebound-agent"},
			"data":     map[string]any{"key": base64.StdEncoding.EncodeToString([]byte(first))},
		}}
		if upgraded := gossipKey(t, renderAgainst(t, values, stored)); upgraded != first {
			t.Errorf("an upgrade replaced the stored key %q with %q", first, upgraded)
		}
	})

	for name, values := range map[string]map[string]any{
		"a lone watcher": {"gossip": map[string]any{"enabled": true, "watchers": 1}},
		"more watchers than an agent's report holds": {"gossip": map[string]any{"enabled": true, "watchers": liveness.MaxWatchers + 1}},
		"pods marked early without gossip":           {"gossip": map[string]any{"markPodsNotReadyEarly": true}},
		"a Lease margin without the Lease plane":     {"gossip": map[string]any{"leaseMargin": "1s"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := chartrender.Render(chartDir, chartrender.Options{Values: values}); err == nil {
				t.Errorf("values %v rendered, want them refused", values)
			}
		})
	}

	// One value for both sides: the members and the controller take the
	// same --gossip-watchers; the margin goes to the controller, which
	// alone times the Leases; the members' probes take the gossip-only
	// port, not the BIRD agent's.
	for _, tc := range []struct {
		name       string
		gossip     map[string]any
		controller []string // in the controller's args
		absent     []string // not in them
		members    []string // in the members' args
	}{
		{name: "defaults", gossip: map[string]any{}, controller: []string{"--gossip-watchers=3"}, absent: []string{"--lease-margin", "--gossip-distrust-"}, members: []string{"--gossip-watchers=3", "--health-addr=:9813"}},
		{name: "set", gossip: map[string]any{"watchers": liveness.MaxWatchers, "leaseMargin": "500ms", "healthPort": 9900, "distrustWindow": "10m", "distrustShare": "0.2"},
			controller: []string{"--gossip-watchers=7", "--lease-margin=500ms", "--gossip-distrust-window=10m", "--gossip-distrust-share=0.2"}, members: []string{"--gossip-watchers=7", "--health-addr=:9900", "--lease-margin=500ms"}},
	} {
		t.Run("settings "+tc.name, func(t *testing.T) {
			values := map[string]any{"enabled": true}
			maps.Copy(values, tc.gossip)
			objs, err := chartrender.Render(chartDir, chartrender.Options{Values: map[string]any{"gossip": values}})
			if err != nil {
				t.Fatal(err)
			}
			got := chartrender.Normalize(objs)
			ctrl := " " + strings.Join(containerArgs(t, got["Deployment rebound-system/rebound-controller"]), " ") + " "
			for _, a := range tc.controller {
				if !strings.Contains(ctrl, " "+a+" ") {
					t.Errorf("controller args %s lack %s", ctrl, a)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(ctrl, " "+a) {
					t.Errorf("controller args %s have %s", ctrl, a)
				}
			}
			ds := got["DaemonSet rebound-agent/rebound-gossip"]
			members := " " + strings.Join(containerArgs(t, ds), " ") + " "
			for _, a := range tc.members {
				if !strings.Contains(members, " "+a+" ") {
					t.Errorf("member args %s lack %s", members, a)
				}
			}
			var d appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds.Object, &d); err != nil {
				t.Fatal(err)
			}
			c := d.Spec.Template.Spec.Containers[0]
			health := strings.TrimPrefix(tc.members[1], "--health-addr=:")
			for _, p := range c.Ports {
				if p.Name == "health" && p.ContainerPort != int32(mustAtoi(t, health)) {
					t.Errorf("health containerPort %d, want %s (the --health-addr the probes use)", p.ContainerPort, health)
				}
			}
		})
	}
}

// TestHelmChartFencing: gossip.fencing.watchdogDevice gives the members
// the fencing flags, the device and a state directory from the host, and
// the privilege to open the device; without it they stay unprivileged,
// with no host path. Values the agent would refuse fail the render.
func TestHelmChartFencing(t *testing.T) {
	member := func(t *testing.T, values map[string]any) corev1.PodSpec {
		t.Helper()
		objs, err := chartrender.Render(chartDir, chartrender.Options{Values: values})
		if err != nil {
			t.Fatal(err)
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(chartrender.Normalize(objs)["DaemonSet rebound-agent/rebound-gossip"].Object, &ds); err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec
	}

	t.Run("off", func(t *testing.T) {
		spec := member(t, map[string]any{"gossip": map[string]any{"enabled": true}})
		c := spec.Containers[0]
		if sc := c.SecurityContext; sc.Privileged != nil || sc.RunAsUser != nil || sc.RunAsNonRoot != nil {
			t.Errorf("securityContext %+v: want no privilege and the pod's non-root user without fencing", sc)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("volume %s: hostPath %s without fencing", v.Name, v.HostPath.Path)
			}
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--watchdog-") || strings.HasPrefix(a, "--fencing-") || strings.HasPrefix(a, "--sanction-") {
				t.Errorf("arg %s without fencing", a)
			}
		}
		if *spec.TerminationGracePeriodSeconds != 10 {
			t.Errorf("terminationGracePeriodSeconds %d, want 10", *spec.TerminationGracePeriodSeconds)
		}
	})

	for _, tc := range []struct {
		name    string
		fencing map[string]any
		args    []string
		state   string
		grace   int64
	}{
		{name: "defaults", fencing: map[string]any{"watchdogDevice": "/dev/watchdog0"},
			args: []string{"--watchdog-device=/dev/watchdog0", "--watchdog-timeout=10s", "--sanction-window=16s", "--fencing-port=7947",
				"--fencing-state=/var/lib/rebound/fencing-list.json", "--fencing-document=rebound-system/rebound-fencing"},
			state: "/var/lib/rebound", grace: 10},
		{name: "set", fencing: map[string]any{"watchdogDevice": "/dev/watchdog1", "watchdogTimeout": "30s", "sanctionWindow": "20s", "port": 7950, "stateDir": "/var/lib/fence"},
			args: []string{"--watchdog-device=/dev/watchdog1", "--watchdog-timeout=30s", "--sanction-window=20s", "--fencing-port=7950",
				"--fencing-state=/var/lib/fence/fencing-list.json", "--fencing-document=rebound-system/rebound-fencing"},
			state: "/var/lib/fence", grace: 30},
	} {
		t.Run("on "+tc.name, func(t *testing.T) {
			spec := member(t, map[string]any{"gossip": map[string]any{"enabled": true, "fencing": tc.fencing}})
			c := spec.Containers[0]
			args := " " + strings.Join(c.Args, " ") + " "
			for _, a := range tc.args {
				if !strings.Contains(args, " "+a+" ") {
					t.Errorf("member args %s lack %s", args, a)
				}
			}
			sc := c.SecurityContext
			switch {
			case sc.Privileged == nil || !*sc.Privileged:
				t.Error("a member that opens a watchdog device must be privileged (device cgroup)")
			case sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot:
				t.Error("a member that opens a watchdog device must run as root (the device node is root's)")
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Error("readOnlyRootFilesystem must stay true")
			case sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation:
				t.Error("allowPrivilegeEscalation false beside privileged: the API refuses the pod")
			}
			device := tc.fencing["watchdogDevice"].(string)
			hostPaths := map[string]corev1.HostPathVolumeSource{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = *v.HostPath
				}
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			for name, want := range map[string]struct {
				path string
				typ  corev1.HostPathType
			}{"watchdog": {device, corev1.HostPathCharDev}, "fencing-state": {tc.state, corev1.HostPathDirectoryOrCreate}} {
				hp, ok := hostPaths[name]
				if !ok || hp.Path != want.path || hp.Type == nil || *hp.Type != want.typ {
					t.Errorf("volume %s: %+v, want hostPath %s of type %s", name, hp, want.path, want.typ)
				}
				if mounts[name] != want.path {
					t.Errorf("volume %s mounted at %q, want %s (the host's path)", name, mounts[name], want.path)
				}
			}
			if *spec.TerminationGracePeriodSeconds != tc.grace {
				t.Errorf("terminationGracePeriodSeconds %d, want %d (at least W, so that a graceful stop can disarm)", *spec.TerminationGracePeriodSeconds, tc.grace)
			}
			psc := spec.SecurityContext
			if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Error("the pod's runAsNonRoot must stay; only the member container runs as root")
			}
		})
	}

	for name, tc := range map[string]struct {
		values map[string]any
		want   []string // in the error
	}{
		"a relative device path": {map[string]any{"watchdogDevice": "dev/watchdog0"},
			[]string{`gossip.fencing.watchdogDevice "dev/watchdog0"`, "absolute path", "/dev/watchdog0"}},
		"a watchdog timeout below a second": {map[string]any{"watchdogDevice": "/dev/watchdog0", "watchdogTimeout": "500ms"},
			[]string{`gossip.fencing.watchdogTimeout "500ms"`, "whole seconds", "10s"}},
		"a watchdog timeout in fractions": {map[string]any{"watchdogDevice": "/dev/watchdog0", "watchdogTimeout": "10.5s"},
			[]string{`gossip.fencing.watchdogTimeout "10.5s"`, "whole seconds"}},
		"a sanction window shorter than a renewal and three polls": {map[string]any{"watchdogDevice": "/dev/watchdog0", "sanctionWindow": "10s"},
			[]string{`gossip.fencing.sanctionWindow "10s"`, "16s"}},
		"the gossip port": {map[string]any{"watchdogDevice": "/dev/watchdog0", "port": 7946},
			[]string{"gossip.fencing.port 7946", "other than gossip.port"}},
		"a relative state directory": {map[string]any{"watchdogDevice": "/dev/watchdog0", "stateDir": "var/lib/rebound"},
			[]string{`gossip.fencing.stateDir "var/lib/rebound"`, "absolute path"}},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			_, err := chartrender.Render(chartDir, chartrender.Options{Values: map[string]any{"gossip": map[string]any{"enabled": true, "fencing": tc.values}}})
			if err == nil {
				t.Fatalf("fencing values %v rendered, want them refused", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	t.Run("refuses fencing without gossip", func(t *testing.T) {
		_, err := chartrender.Render(chartDir, chartrender.Options{Values: map[string]any{"gossip": map[string]any{"fencing": map[string]any{"watchdogDevice": "/dev/watchdog0"}}}})
		if err == nil || !strings.Contains(err.Error(), "needs gossip.enabled") {
			t.Errorf("fencing without gossip.enabled: %v, want refused for want of gossip.enabled", err)
		}
	})
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// renderAgainst renders the chart as an upgrade would with existing in
// the cluster (Helm's lookup reads it).
func renderAgainst(t *testing.T, values map[string]any, existing *unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: "rebound", Namespace: "rebound-system", IsUpgrade: existing != nil, IsInstall: existing == nil, Revision: 1,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	if existing != nil {
		objs = append(objs, existing)
	}
	files, err := engine.RenderWithClientProvider(ch, vals, fakeClients{dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), objs...)})
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for name, f := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		o, err := chartrender.Decode([]byte(f))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, o...)
	}
	return chartrender.Normalize(out)
}

// fakeClients serves Helm's lookup from a fake dynamic client: Secrets
// only, which is all the chart looks up.
type fakeClients struct {
	c *dynamicfake.FakeDynamicClient
}

func (f fakeClients) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "Secret" {
		return nil, false, fmt.Errorf("lookup of %s %s: the test serves Secrets only", apiVersion, kind)
	}
	return f.c.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}), true, nil
}

// gossipKey returns the key file the chart's Secret holds.
func gossipKey(t *testing.T, objs map[string]*unstructured.Unstructured) string {
	t.Helper()
	s := objs["Secret rebound-agent/rebound-gossip-key"]
	if s == nil {
		t.Fatal("Secret rebound-gossip-key not rendered")
	}
	data, _, _ := unstructured.NestedString(s.Object, "data", "key")
	file, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		t.Fatalf("Secret rebound-gossip-key data.key: %v", err)
	}
	return string(file)
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
