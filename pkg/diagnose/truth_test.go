package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/unreachable"
	"rebound/pkg/zone"
)

// apiCluster is a cluster as the API holds it: diagnose reads it with
// Gather, as `rebound diagnose` does, so that the Leases, the agents'
// PeeringReports and rebound's Events take the path they take in a real
// run.
type apiCluster struct {
	now  time.Time
	kube []runtime.Object
	dyn  []runtime.Object
}

func newAPICluster(now time.Time) *apiCluster {
	return &apiCluster{now: now, kube: []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}}}
}

// node adds a node whose Ready condition is status since, and its Lease
// renewed at renew (none when zero; duration 40 s: renewed every 10 s).
func (c *apiCluster) node(name string, status corev1.ConditionStatus, since, renew time.Time, taints ...corev1.Taint) {
	c.kube = append(c.kube, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{zone.LabelTopologyZone: "z1", zone.LabelTopologyRegion: "r1"}},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}},
		},
	})
	if !renew.IsZero() {
		rt := metav1.NewMicroTime(renew)
		c.kube = append(c.kube, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: ptr(int32(40))},
		})
	}
}

// deployment adds a critical (kube-system) Deployment with one pod on node,
// available of 1 available; the pod is returned for changes.
func (c *apiCluster) deployment(name, node string, available int32) *corev1.Pod {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID("uid-Deployment-" + name)},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr(int32(1))},
		Status:     appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: available},
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name + "-5d4f", UID: types.UID("uid-ReplicaSet-" + name + "-5d4f"),
			OwnerReferences: controllerRef("Deployment", name)},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr(int32(1))},
		Status: appsv1.ReplicaSetStatus{Replicas: 1, AvailableReplicas: available},
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name + "-5d4f-x0", UID: types.UID("uid-pod-" + name + "-5d4f-x0"),
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)), OwnerReferences: controllerRef("ReplicaSet", rs.Name)},
		Spec:   corev1.PodSpec{NodeName: node, Tolerations: tolerations(300)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}},
	}
	c.kube = append(c.kube, d, rs, p)
	return p
}

// replacement adds a Ready pod of the Deployment's ReplicaSet on node.
func (c *apiCluster) replacement(name, node string) {
	c.kube = append(c.kube, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name + "-5d4f-y9", UID: types.UID("uid-pod-" + name + "-5d4f-y9"),
			CreationTimestamp: metav1.NewTime(t0), OwnerReferences: controllerRef("ReplicaSet", name+"-5d4f")},
		Spec:   corev1.PodSpec{NodeName: node, Tolerations: tolerations(300)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	})
}

// policy adds a RecoveryPolicy selecting kube-system's pods.
func (c *apiCluster) policy(maxUnavailable string, detection v1alpha1.Detection) {
	spec := map[string]any{"critical": map[string]any{"namespaces": []any{"kube-system"}}, "maxUnavailableTime": maxUnavailable}
	if detection != "" {
		spec["detection"] = string(detection)
	}
	c.dyn = append(c.dyn, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rebound.dev/v1alpha1", "kind": "RecoveryPolicy",
		"metadata": map[string]any{"name": "default"}, "spec": spec,
	}})
}

// gossipOnly adds the PeeringReport of a gossip-only agent (`rebound agent
// --gossip-only`: the gossip field alone), written at at. It lists the
// members it watches on ring (as the agents and the controller compute
// it) among nodes, Alive unless states says Dead, or "-" for a member it
// does not list.
func (c *apiCluster) gossipOnly(t *testing.T, reporter string, at time.Time, ring, nodes []string, states map[string]string) {
	g := liveness.GossipReport{ObservedAt: at, Members: len(ring)}
	for _, n := range nodes {
		if n == reporter || !slices.Contains(liveness.Watchers(n, ring, liveness.DefaultWatchers), reporter) {
			continue
		}
		state := cmpOr(states[n], liveness.GossipAlive)
		if state == "-" {
			continue
		}
		since := t0.Add(-time.Hour)
		if state == liveness.GossipDead {
			// An agent sees a death after it happened: a second
			// before it wrote.
			since = at.Add(-time.Second)
		}
		g.Watches = append(g.Watches, liveness.Watch{Node: n, State: state, Since: since})
	}
	slices.SortFunc(g.Watches, func(a, b liveness.Watch) int { return strings.Compare(a.Node, b.Node) })
	obj := kube.GossipToAPI(reporter, g)
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("PeeringReport")
	c.dyn = append(c.dyn, u)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// run gathers and explains the cluster and returns its text and JSON.
func (c *apiCluster) run(t *testing.T) (string, string) {
	kc := fake.NewClientset(c.kube...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{RecoveryPolicies: "RecoveryPolicyList", v1alpha1.PeeringReports: "PeeringReportList"}, c.dyn...)
	s, x, err := Gather(context.Background(), Clients{Kube: kc, Dynamic: dyn, Host: "https://api.example:6443", Timeout: time.Second}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	r := Explain(s, x)
	var text, js bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	return text.String(), js.String()
}

func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, prefix+string(rune('0'+i)))
	}
	return out
}

// TestTellsTheTruth: what diagnose prints of a black-box run's states is
// true, in text (testdata/TestTellsTheTruth_<name>.golden; -update
// rewrites them) and in JSON: no NotReady duration for a node the API has
// Ready, no zero time, the deleter its records name, no BGP noise from
// gossip-only agents, and a line for each node whose early detection is
// off.
func TestTellsTheTruth(t *testing.T) {
	cases := []struct {
		name    string
		cluster func(t *testing.T) *apiCluster
		// words must appear in the text and the JSON; absent in neither.
		words, absent []string
	}{{
		// A TwoPlanes policy (S13's, 0 s) examines the pods of a node the
		// API still has Ready once it is dead on both planes and marked.
		name: "twoplanes_early",
		cluster: func(t *testing.T) *apiCluster {
			c := newAPICluster(at(20 * time.Second))
			all := names("node-", 5)
			marked, _ := unreachable.WithTaint(nil, metav1.NewTime(at(time.Second)))
			for _, n := range all {
				if n == "node-3" {
					c.node(n, corev1.ConditionTrue, t0.Add(-time.Hour), at(-13*time.Second), marked...)
					continue
				}
				c.node(n, corev1.ConditionTrue, t0.Add(-time.Hour), at(19*time.Second))
			}
			ring := []string{"node-0", "node-1", "node-2", "node-4"}
			for _, r := range ring {
				c.gossipOnly(t, r, at(15*time.Second), ring, all, map[string]string{"node-3": liveness.GossipDead})
			}
			c.deployment("coredns", "node-3", 0)
			c.policy("0s", v1alpha1.DetectionTwoPlanes)
			return c
		},
		words:  []string{"Ready in the API, dead on both planes since", `"readyInAPI": true`, `"detectedAt": "2026-03-01T11:59:59Z"`},
		absent: []string{"on NotReady node node-3", "node-3, NotReady since", "NotReady for"},
	}, {
		// rebound deleted the pod; kube-controller-manager's taint eviction
		// set its DisruptionTarget condition when the toleration ran out,
		// on the pod already Terminating.
		name: "rebound_deleted",
		cluster: func(t *testing.T) *apiCluster {
			c := newAPICluster(at(6 * time.Minute))
			for _, n := range names("node-", 5) {
				if n == "node-3" {
					c.node(n, corev1.ConditionUnknown, t0, at(-10*time.Second), noExecute(corev1.TaintNodeUnreachable, t0))
					continue
				}
				c.node(n, corev1.ConditionTrue, t0.Add(-time.Hour), at(6*time.Minute-time.Second))
			}
			p := c.deployment("coredns", "node-3", 1)
			p.DeletionTimestamp = ptr(metav1.NewTime(at(61 * time.Second)))
			p.DeletionGracePeriodSeconds = ptr(int64(30))
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "DeletionByTaintManager", LastTransitionTime: metav1.NewTime(at(300 * time.Second))})
			c.replacement("coredns", "node-0")
			c.kube = append(c.kube, &corev1.Event{
				ObjectMeta:          metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns.1"},
				InvolvedObject:      corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "kube-system", Name: "coredns"},
				Related:             &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "kube-system", Name: p.Name, UID: p.UID},
				Reason:              "StrandedPodDeleted",
				Type:                corev1.EventTypeNormal,
				EventTime:           metav1.NewMicroTime(at(31 * time.Second)),
				ReportingController: "rebound-controller",
			})
			c.policy("30s", "")
			return c
		},
		words:  []string{"deleted by rebound", "Event StrandedPodDeleted from rebound-controller at 2026-03-01T12:00:31Z", `"actor": "rebound"`},
		absent: []string{"evicted by kube-controller-manager", "TaintEviction"},
	}, {
		// The documented install without BIRD: every agent gossip-only.
		name: "gossip_only",
		cluster: func(t *testing.T) *apiCluster {
			c := newAPICluster(at(time.Minute))
			all := names("node-", 3)
			for _, n := range all {
				c.node(n, corev1.ConditionTrue, t0.Add(-time.Hour), at(59*time.Second))
			}
			for _, r := range all {
				c.gossipOnly(t, r, at(50*time.Second), all, all, nil)
			}
			c.policy("30s", "")
			return c
		},
		words:  []string{"3 agent(s) report gossip only", `"status": "On"`},
		absent: []string{"is `rebound agent` running", "BGPReport", "report of an unknown time", `"reportTime"`},
	}, {
		// node-3's agent never joined (nobody watches it); node-4's agent
		// died: its read is stale, and its watchers have it Dead.
		name: "gossip_member_dead",
		cluster: func(t *testing.T) *apiCluster {
			c := newAPICluster(at(time.Minute))
			all := names("node-", 5)
			for _, n := range all {
				c.node(n, corev1.ConditionTrue, t0.Add(-time.Hour), at(59*time.Second))
			}
			ring := []string{"node-0", "node-1", "node-2"}
			for _, r := range ring {
				c.gossipOnly(t, r, at(50*time.Second), ring, all, map[string]string{"node-3": "-", "node-4": liveness.GossipDead})
			}
			c.gossipOnly(t, "node-4", at(-10*time.Minute), ring, all, nil)
			c.policy("30s", "")
			return c
		},
		words: []string{"node-3: off", "no gossip report from its member", "only 0 of its 3 gossip watchers can vote on it",
			"node-4: on the Lease alone", "its member's gossip report is stale (written at 2026-03-01T11:50:00Z)",
			`"status": "Partial"`, `"mode": "LeaseOnly"`, `"ownGossip": "missing"`,
			"node-4: the planes disagree (WatchersSayDead), not judged early until", `"reason": "WatchersSayDead"`, `"held": "Node"`},
		// A member that never reported is coverage (off), not a
		// disagreement: its alert would fire for ever on a node the
		// agents do not run on.
		absent: []string{"node-3: the planes disagree", `"reason": "MemberDown"`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text, js := tc.cluster(t).run(t)
			for i, line := range strings.Split(text, "\n") {
				if len(line) > textWidth && strings.Contains(line, " ") {
					t.Errorf("line %d is %d characters long: %q", i+1, len(line), line)
				}
			}
			// Go's zero time and its largest duration, the marks of a zero
			// time subtracted somewhere.
			for _, word := range append([]string{"0001-01-01", "2562047h", "an unknown time"}, tc.absent...) {
				if strings.Contains(text, word) {
					t.Errorf("text has %q:\n%s", word, text)
				}
				if strings.Contains(js, word) {
					t.Errorf("JSON has %q", word)
				}
			}
			for _, word := range tc.words {
				if !strings.Contains(text, word) && !strings.Contains(js, word) {
					t.Errorf("neither text nor JSON has %q:\n%s", word, text)
				}
			}
			golden := filepath.Join("testdata", "TestTellsTheTruth_"+tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if text != string(want) {
				t.Errorf("output differs from %s (-update rewrites it):\n%s", golden, text)
			}
		})
	}
}
