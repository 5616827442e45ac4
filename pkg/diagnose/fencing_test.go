package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
)

// fencingReport is an agent's fencing block with the default timing,
// counting against list 3 of node-0..node-3.
func fencingReport(armed bool, reason, boot string) *v1alpha1.FencingReport {
	return &v1alpha1.FencingReport{ObservedAt: metav1.NewTime(at(-5 * time.Second)), Armed: armed, Reason: reason,
		WatchdogSeconds: 10, SanctionSeconds: 16, BootID: boot,
		Lists: []v1alpha1.MemberList{{Number: 3, Members: []string{"node-0", "node-1", "node-2", "node-3"}}}}
}

// fencingWorld is four Ready nodes on boots boot-0..boot-3.
func fencingWorld() *world {
	w := newWorld(at(20 * time.Second))
	w.cluster(4)
	for i, n := range w.s.Nodes {
		n.Status.NodeInfo.BootID = "boot-" + string(rune('0'+i))
	}
	w.x.FencingReports = map[string]*v1alpha1.FencingReport{}
	return w
}

// outOfServiceTaint is node.kubernetes.io/out-of-service as rebound puts it.
func outOfServiceTaint(added time.Time) corev1.Taint {
	t := noExecute(corev1.TaintNodeOutOfService, added)
	t.Value = fencing.OutOfServiceValue
	return t
}

// TestExplainFencing: each node whose agent reports fencing, or that
// carries the out-of-service taint, gets its state, the reason first, and
// the times and lists it is fenced by; a cluster without either has no
// fencing section.
func TestExplainFencing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *world)
		node  string
		check func(t *testing.T, n FencingNode)
		text  []string
	}{{
		name: "armed",
		setup: func(w *world) {
			w.x.FencingReports["node-1"] = fencingReport(true, "", "boot-1")
		},
		node: "node-1",
		check: func(t *testing.T, n FencingNode) {
			if n.State != "Armed" || n.EarlierBoot || n.OutOfService || n.EarliestFencing != nil {
				t.Errorf("state = %+v", n)
			}
			want := Seconds(39.7) // (16 s + 2·10 s)·1.01² + 3 s
			if n.FenceWaitSeconds == nil || *n.FenceWaitSeconds != want {
				t.Errorf("fenceWaitSeconds = %v, want %v", n.FenceWaitSeconds, want)
			}
			if !strings.Contains(n.Reason, "if it died now, fenced no sooner than 39.7s (T + 2W + margin) after the controller reads it dead, once 2 of list 3's 3 other members testify") {
				t.Errorf("reason = %q", n.Reason)
			}
			if n.Agent == nil || !slices.Equal(n.Agent.Lists, []int64{3}) || n.Agent.WatchdogSeconds != 10 || n.Agent.SanctionSeconds != 16 {
				t.Errorf("agent = %+v", n.Agent)
			}
		},
		text: []string{"node-1: armed: if it died now", "W 10s, T 16s, list 3, boot boot-1 (the Node's boot)"},
	}, {
		name: "armed and dead on both planes, a round open",
		setup: func(w *world) {
			w.x.FencingReports["node-2"] = fencingReport(true, "", "boot-2")
			w.s.Verdicts = map[string]liveness.NodeVerdict{"node-2": {Verdict: liveness.Dead, Early: true, DetectedAt: at(5 * time.Second)}}
			w.x.FencingDocument = &fencing.Document{List: fencing.List{Number: 3, Members: []string{"node-0", "node-1", "node-2", "node-3"}},
				Rounds: []fencing.RoundRequest{{Node: "node-2", Round: "node-2-1-abcdefghij"}}}
			w.x.FencingDocumentState = FencingDocumentPublished
		},
		node: "node-2",
		check: func(t *testing.T, n FencingNode) {
			wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
			if n.State != "Armed" || n.EarliestFencing == nil || !n.EarliestFencing.Equal(at(5*time.Second).Add(wait)) || n.OpenRound != "node-2-1-abcdefghij" {
				t.Errorf("node-2 = %+v", n)
			}
			if !strings.HasPrefix(n.Reason, "dead on both planes since 12:00:05Z: fenced no sooner than 12:00:44Z") {
				t.Errorf("reason = %q", n.Reason)
			}
		},
		text: []string{"published list 3 of 4 member(s), 1 open round(s)", "round node-2-1-abcdefghij open"},
	}, {
		name: "not armed, with the agent's reason",
		setup: func(w *world) {
			w.x.FencingReports["node-3"] = fencingReport(false, "the watchdog's action is not a reset", "boot-3")
		},
		node: "node-3",
		check: func(t *testing.T, n FencingNode) {
			if n.State != "NotArmed" || n.Agent == nil || n.Agent.Armed ||
				!strings.HasPrefix(n.Reason, "not armed: the watchdog's action is not a reset; rebound never fences it") {
				t.Errorf("node-3 = %+v", n)
			}
		},
		text: []string{"node-3: not armed: the watchdog's action is not a reset"},
	}, {
		name: "report of an earlier boot",
		setup: func(w *world) {
			w.x.FencingReports["node-1"] = fencingReport(true, "", "boot-old")
		},
		node: "node-1",
		check: func(t *testing.T, n FencingNode) {
			if n.State != "EarlierBoot" || !n.EarlierBoot || n.NodeBootID != "boot-1" ||
				!strings.Contains(n.Reason, "report of an earlier boot (the report names boot boot-old, the Node runs boot-1)") {
				t.Errorf("node-1 = %+v", n)
			}
		},
		text: []string{"boot boot-old (an earlier boot)"},
	}, {
		name: "tainted by rebound and verified, waiting for a new boot",
		setup: func(w *world) {
			n := w.nodeNamed("node-2")
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
			n.Spec.Taints = append(n.Spec.Taints, outOfServiceTaint(at(10*time.Second)))
			n.Annotations[fencing.AnnotationFencedBoot] = "boot-2"
			n.Annotations[fencing.AnnotationVerified] = "node-2-1-abcdefghij"
			w.x.FencingReports["node-2"] = fencingReport(true, "", "boot-2")
			w.statefulSet("db", "node-2", 0)
			// A DaemonSet pod tolerates the taint: it never holds it.
			p := w.pod("kube-system", "agent-x", "node-2", false, "DaemonSet", "agent")
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
			w.x.FencingEvents = []FencingEvent{
				{Node: "node-2", Reason: "FencingTainted", Message: "dead on both planes, armed", Time: at(10 * time.Second)},
				{Node: "node-2", Reason: "FencingVerified", Message: "tainted, and the Lease, boot ID and report are unchanged since the round's read", Time: at(11 * time.Second)},
				{Node: "node-1", Reason: "FencingUntainted", Message: "earlier", Time: at(12 * time.Second)},
			}
		},
		node: "node-2",
		check: func(t *testing.T, n FencingNode) {
			if n.State != "Fenced" || !n.OutOfService || n.TaintedBy != "rebound" || n.FencedBootID != "boot-2" || n.VerifiedRound != "node-2-1-abcdefghij" ||
				n.TaintedAt == nil || !n.TaintedAt.Equal(at(10*time.Second)) {
				t.Errorf("node-2 = %+v", n)
			}
			if want := []string{"a new boot ID", "Ready", "1 old pod(s) gone"}; !slices.Equal(n.WaitingFor, want) {
				t.Errorf("waitingFor = %q, want %q", n.WaitingFor, want)
			}
			if n.LastEvent == nil || n.LastEvent.Reason != "FencingVerified" {
				t.Errorf("lastEvent = %+v", n.LastEvent)
			}
		},
		text: []string{"node-2: fenced by rebound (boot boot-2), verified by round node-2-1-abcdefghij", "waits for a new boot ID, Ready, 1 old pod(s) gone",
			"last Event FencingVerified at 12:00:11Z"},
	}, {
		name: "tainted by a person",
		setup: func(w *world) {
			n := w.nodeNamed("node-3")
			n.Spec.Taints = append(n.Spec.Taints, outOfServiceTaint(at(0)))
		},
		node: "node-3",
		check: func(t *testing.T, n FencingNode) {
			if n.State != "TaintedByOther" || n.TaintedBy != "other" || n.Agent != nil || n.FencedBootID != "" ||
				!strings.HasPrefix(n.Reason, "carries node.kubernetes.io/out-of-service put by a person or another fencing agent") {
				t.Errorf("node-3 = %+v", n)
			}
		},
		text: []string{"node-3: carries node.kubernetes.io/out-of-service put by a person"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := fencingWorld()
			tc.setup(w)
			r := w.explain()
			if r.Fencing == nil {
				t.Fatal("no fencing section")
			}
			var got *FencingNode
			for i := range r.Fencing.Nodes {
				if r.Fencing.Nodes[i].Node == tc.node {
					got = &r.Fencing.Nodes[i]
				}
			}
			if got == nil || len(r.Fencing.Nodes) != 1 {
				t.Fatalf("fencing nodes = %+v, want %s alone", r.Fencing.Nodes, tc.node)
			}
			tc.check(t, *got)
			var buf bytes.Buffer
			if err := WriteText(&buf, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), "\nFencing (watchdog self-fencing") {
				t.Errorf("text lacks the fencing section:\n%s", buf.String())
			}
			for _, s := range tc.text {
				if !strings.Contains(strings.Join(strings.Fields(buf.String()), " "), s) {
					t.Errorf("text lacks %q:\n%s", s, buf.String())
				}
			}
		})
	}

	t.Run("no fencing at all", func(t *testing.T) {
		w := fencingWorld()
		r := w.explain()
		if r.Fencing != nil {
			t.Errorf("fencing = %+v, want none", r.Fencing)
		}
		var buf bytes.Buffer
		if err := WriteText(&buf, r); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "Fencing (") {
			t.Errorf("text has a fencing section:\n%s", buf.String())
		}
		buf.Reset()
		if err := WriteJSON(&buf, r); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["fencing"]; ok || m["schemaVersion"] != float64(1) {
			t.Errorf("JSON has fencing %v, schemaVersion %v", m["fencing"], m["schemaVersion"])
		}
	})
}

// TestGatherFencing: with an agent reporting fencing, Gather keeps its
// fencing block, lists the controller's fencing Events and gets the
// published document; a forbidden document is one warning, never a
// failure. Without fencing in view it reads neither.
func TestGatherFencing(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	report := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rebound.dev/v1alpha1", "kind": "PeeringReport",
		"metadata": map[string]any{"name": "node-0"},
		"report":   map[string]any{"observedAt": "2026-03-01T11:59:50Z"},
		"fencing": map[string]any{"observedAt": "2026-03-01T11:59:55Z", "armed": true, "watchdogSeconds": int64(10), "sanctionSeconds": int64(16), "bootID": "b",
			"lists": []any{map[string]any{"number": int64(1), "members": []any{"node-0", "node-1", "node-2"}}}},
	}}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "node-0.1"}, Reason: "FencingFailed", Message: "Taint failed: conflict",
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-0"}, LastTimestamp: metav1.NewTime(t0)}
	doc, _ := fencing.Document{List: fencing.List{Number: 1, Members: []string{"node-0", "node-1", "node-2"}}}.Encode()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rebound-system", Name: fencing.DefaultDocumentName}, Data: map[string]string{fencing.DocumentKey: string(doc)}}

	t.Run("read", func(t *testing.T) {
		_, dyn, c := fakeClients(node, ev, cm)
		if err := dyn.Tracker().Create(schema.GroupVersionResource{Group: "rebound.dev", Version: "v1alpha1", Resource: "peeringreports"}, report, ""); err != nil {
			t.Fatal(err)
		}
		_, x, err := Gather(context.Background(), c, t0)
		if err != nil {
			t.Fatal(err)
		}
		if f := x.FencingReports["node-0"]; f == nil || !f.Armed || f.BootID != "b" {
			t.Errorf("fencing reports = %+v", x.FencingReports)
		}
		if len(x.FencingEvents) != 1 || x.FencingEvents[0].Reason != "FencingFailed" || x.FencingEvents[0].Node != "node-0" {
			t.Errorf("fencing events = %+v", x.FencingEvents)
		}
		if x.FencingDocumentState != FencingDocumentPublished || x.FencingDocument == nil || x.FencingDocument.List.Number != 1 {
			t.Errorf("document = %s %+v", x.FencingDocumentState, x.FencingDocument)
		}
	})

	t.Run("document forbidden", func(t *testing.T) {
		kube, dyn, c := fakeClients(node, cm)
		if err := dyn.Tracker().Create(schema.GroupVersionResource{Group: "rebound.dev", Version: "v1alpha1", Resource: "peeringreports"}, report, ""); err != nil {
			t.Fatal(err)
		}
		kube.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, fencing.DefaultDocumentName, nil)
		})
		_, x, err := Gather(context.Background(), c, t0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, wn := range x.Warnings {
			if strings.Contains(wn, "cannot read the fencing document rebound-system/rebound-fencing (Forbidden)") {
				n++
			}
		}
		if n != 1 || x.FencingDocumentState != FencingDocumentForbidden || x.FencingDocument != nil {
			t.Errorf("state %s, warnings %q", x.FencingDocumentState, x.Warnings)
		}
	})

	t.Run("no fencing in view", func(t *testing.T) {
		kube, _, c := fakeClients(node, cm)
		if _, _, err := Gather(context.Background(), c, t0); err != nil {
			t.Fatal(err)
		}
		for _, a := range kube.Actions() {
			if a.GetVerb() == "get" || strings.Contains(a.GetResource().Resource, "configmaps") && a.GetVerb() != "list" {
				t.Errorf("Gather did %s %s without fencing in view", a.GetVerb(), a.GetResource().Resource)
			}
		}
	})
}
