package feeder

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dfake "k8s.io/client-go/dynamic/fake"
	kfake "k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
)

// TestAPILeasesReadsTheRenewal: the renewal is renewTime and holder, read
// by a GET with no resourceVersion; a change elsewhere in the object is
// not a renewal.
func TestAPILeasesReadsTheRenewal(t *testing.T) {
	renew := metav1.NewMicroTime(time.Date(2026, 12, 5, 10, 0, 0, 123456000, time.UTC))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: corev1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1"), RenewTime: &renew},
	}
	api := kfake.NewClientset(lease)
	l := APILeases{Client: api, Node: "node-1"}
	first, err := l.ReadLease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (fencing.Renewal{RenewTime: "2026-12-05T10:00:00.123456Z", Holder: "node-1"}); first != want {
		t.Fatalf("read %+v, want %+v", first, want)
	}
	for _, a := range api.Actions() {
		if g, ok := a.(ktesting.GetActionImpl); ok && g.GetOptions.ResourceVersion != "" {
			t.Fatalf("GET with resourceVersion %q: not a quorum read", g.GetOptions.ResourceVersion)
		}
	}
	lease.Labels = map[string]string{"x": "y"}
	if _, err := api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := l.ReadLease(context.Background()); again != first {
		t.Fatalf("a label change read as a renewal: %+v then %+v", first, again)
	}
	if _, err := (APILeases{Client: api, Node: "node-9"}).ReadLease(context.Background()); err == nil {
		t.Fatal("a missing Lease read without error")
	}
}

// TestAPIReportsAppliesOnlyTheFencingField: the write is one forced
// server-side apply under the fencing field manager holding the fencing
// field alone (never the BGP or gossip writers' fields); the read-back
// returns the fencing field of what the apiserver holds.
func TestAPIReportsAppliesOnlyTheFencingField(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	stored := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "PeeringReport",
		"metadata": map[string]any{"name": "node-1", "resourceVersion": "41"},
		"fencing":  map[string]any{"observedAt": "2026-12-05T10:00:00Z", "armed": false, "reason": "disarmed", "watchdogSeconds": int64(10), "sanctionSeconds": int64(16), "bootID": "b1"},
	}}
	api := dfake.NewSimpleDynamicClient(s, stored)
	var patch ktesting.PatchActionImpl
	api.PrependReactor("patch", "peeringreports", func(a ktesting.Action) (bool, runtime.Object, error) {
		patch = a.(ktesting.PatchActionImpl)
		return true, stored, nil
	})
	w := APIReports{Client: api, Node: "node-1"}
	rep := v1alpha1.FencingReport{ObservedAt: metav1.NewTime(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)), Armed: true, WatchdogSeconds: 10, SanctionSeconds: 16, BootID: "b1"}
	if err := w.WriteFencing(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	if patch.PatchType != types.ApplyPatchType || patch.PatchOptions.FieldManager != FieldManager || patch.PatchOptions.Force == nil || !*patch.PatchOptions.Force || patch.Name != "node-1" {
		t.Fatalf("patch %s by %q force %v on %q, want a forced apply by %q on node-1", patch.PatchType, patch.PatchOptions.FieldManager, patch.PatchOptions.Force, patch.Name, FieldManager)
	}
	var sent map[string]any
	if err := json.Unmarshal(patch.Patch, &sent); err != nil {
		t.Fatal(err)
	}
	for k := range sent {
		if k != "apiVersion" && k != "kind" && k != "metadata" && k != "fencing" {
			t.Fatalf("the apply holds %q: it would take that field from its owner", k)
		}
	}
	// The apply is conditional on the report as read just before it: an
	// abandoned write can never be applied after a later one.
	if rv, _ := sent["metadata"].(map[string]any)["resourceVersion"].(string); rv != "41" {
		t.Fatalf("the apply carries resourceVersion %q, want the one just read (41)", rv)
	}
	got, err := w.ReadFencing(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Armed || got.Reason != "disarmed" || got.BootID != "b1" {
		t.Fatalf("read back %+v, want the stored disarmed report", got)
	}
	if _, err := (APIReports{Client: api, Node: "node-9"}).ReadFencing(context.Background()); err == nil {
		t.Fatal("a missing report read without error")
	}
}
