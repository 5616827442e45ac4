package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

// peeringWrites records every write the reconciler makes, as
// "verb kind/name", and fails the ones fail says to.
type peeringWrites struct {
	mu   sync.Mutex
	got  []string
	fail func(verb string, obj client.Object) error
}

func (w *peeringWrites) record(verb string, obj client.Object) error {
	kind := fmt.Sprintf("%T", obj)
	if u, ok := obj.(*unstructured.Unstructured); ok {
		kind = u.GetKind()
	}
	w.mu.Lock()
	w.got = append(w.got, fmt.Sprintf("%s %s/%s", verb, strings.TrimPrefix(kind, "*v1."), obj.GetName()))
	w.mu.Unlock()
	if w.fail != nil {
		return w.fail(verb, obj)
	}
	return nil
}

// take returns the writes since the last call.
func (w *peeringWrites) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// newPeeringWithCalico is a reconciler over a fake API that serves
// Calico's v3 BGPPeer, with every write going through w.
func newPeeringWithCalico(t *testing.T, w *peeringWrites, objs ...client.Object) (*PeeringReconciler, client.Client) {
	return newPeeringServingCalico(t, w, []schema.GroupVersionKind{calico.BGPPeerV3GVK}, objs...)
}

// servedGroups is a discovery that serves the groups of served.
type servedGroups []schema.GroupVersionKind

func (s servedGroups) ServerGroups() (*metav1.APIGroupList, error) {
	l := &metav1.APIGroupList{Groups: []metav1.APIGroup{{Name: "apps"}}}
	for _, gvk := range s {
		l.Groups = append(l.Groups, metav1.APIGroup{Name: gvk.Group})
	}
	return l, nil
}

// newPeeringServingCalico is a reconciler over a fake API that serves the
// BGPPeer of each of served (discovery and mapping alike), with every
// write going through w.
func newPeeringServingCalico(t *testing.T, w *peeringWrites, served []schema.GroupVersionKind, objs ...client.Object) (*PeeringReconciler, client.Client) {
	t.Helper()
	s := Scheme()
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range served {
		s.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
		s.AddKnownTypeWithName(gvk.GroupVersion().WithKind("BGPPeerList"), &unstructured.UnstructuredList{})
		mapper.Add(gvk, meta.RESTScopeRoot)
	}
	base := fake.NewClientBuilder().WithScheme(s).WithRESTMapper(mapper).WithObjects(objs...).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := w.record("create", obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := w.record("update", obj); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := w.record("patch", obj); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := w.record("delete", obj); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	r, _ := newPeeringForTest(base, clocktesting.NewFakeClock(peeringT0))
	r.client, r.reader = c, c
	r.discovery = servedGroups(served)
	r.opts.Calico = &calico.PeerOptions{MaxRestartTime: 30 * time.Second}
	return r, base
}

func peeringPublishNodes() []client.Object {
	return []client.Object{
		peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil),
		peeringTestNode("b", "10.0.0.2", false, peeringT0.Add(-time.Minute), nil),    // NotReady past its grace
		peeringTestNode("c", "10.0.0.3", false, peeringT0.Add(-10*time.Second), nil), // within its grace
	}
}

// TestPeeringReconcileTwiceWritesNothing: the first pass writes the state,
// the document, the labels and the BGPPeer; a second pass, at the same
// time or a moment later with nothing changed, writes nothing at all.
func TestPeeringReconcileTwiceWritesNothing(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	w := &peeringWrites{}
	r, _ := newPeeringWithCalico(t, w, peeringPublishNodes()...)

	if _, err := r.pass(ctx, ctrl.Log); err != nil {
		t.Fatal(err)
	}
	first := w.take()
	slices.Sort(first)
	want := []string{
		"create BGPPeer/" + calico.DefaultPeerName,
		"create ConfigMap/" + DefaultPeeringStateName,
		"create ConfigMap/" + peering.DefaultPeerSetName,
		"patch Node/a", "patch Node/b", "patch Node/c",
	}
	slices.Sort(want)
	if !slices.Equal(first, want) {
		t.Fatalf("first pass wrote %v, want %v", first, want)
	}

	for _, step := range []time.Duration{0, time.Second} {
		r.opts.Clock.(*clocktesting.FakeClock).Step(step)
		res, err := r.pass(ctx, ctrl.Log)
		if err != nil {
			t.Fatal(err)
		}
		if again := w.take(); len(again) != 0 {
			t.Errorf("pass %s later wrote %v, want nothing", step, again)
		}
		// c's grace ends 30 s after the first pass: the requeue still
		// comes then.
		if want := 30*time.Second - step; res.RequeueAfter != want {
			t.Errorf("pass %s later: RequeueAfter %v, want %v", step, res.RequeueAfter, want)
		}
	}
}

// TestPeeringPublisherFailureIsNamedAndOthersRun: a publisher that fails
// is named in the pass's error and the publishers that do not depend on
// it still publish; the labels, which follow the document, wait for it.
func TestPeeringPublisherFailureIsNamedAndOthersRun(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	failIf := func(verb, kind string) func(string, client.Object) error {
		return func(v string, obj client.Object) error {
			k := fmt.Sprintf("%T", obj)
			if u, ok := obj.(*unstructured.Unstructured); ok {
				k = u.GetKind()
			}
			if v == verb && (strings.HasSuffix(k, "."+kind) || k == kind) && (kind != "ConfigMap" || obj.GetName() == peering.DefaultPeerSetName) {
				return errors.New("apiserver unavailable")
			}
			return nil
		}
	}
	tests := []struct {
		name      string
		fail      func(string, client.Object) error
		named     []string // publishers the error names
		notNamed  []string
		published []string // writes that still went through
	}{
		{
			name:      "labels fail: document and BGPPeer published",
			fail:      failIf("patch", "Node"),
			named:     []string{"node labels: label node a"},
			notNamed:  []string{"peer-set document", "Calico BGPPeer"},
			published: []string{"create ConfigMap/" + peering.DefaultPeerSetName, "create BGPPeer/" + calico.DefaultPeerName},
		},
		{
			name:      "BGPPeer fails: document and labels published",
			fail:      failIf("create", "BGPPeer"),
			named:     []string{"Calico BGPPeer: calico backend: create BGPPeer"},
			notNamed:  []string{"peer-set document", "node labels"},
			published: []string{"create ConfigMap/" + peering.DefaultPeerSetName, "patch Node/a", "patch Node/b", "patch Node/c"},
		},
		{
			name:      "document fails: the labels wait for it, BGPPeer published",
			fail:      failIf("create", "ConfigMap"),
			named:     []string{"peer-set document: create the published peer set ConfigMap", "node labels: not published, because the peer-set document was not"},
			notNamed:  []string{"Calico BGPPeer"},
			published: []string{"create BGPPeer/" + calico.DefaultPeerName},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &peeringWrites{fail: tc.fail}
			r, base := newPeeringWithCalico(t, w, peeringPublishNodes()...)
			_, err := r.pass(ctx, ctrl.Log)
			if err == nil {
				t.Fatal("pass returned no error")
			}
			for _, s := range tc.named {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			for _, s := range tc.notNamed {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q names %q, which did not fail", err, s)
				}
			}
			writes := w.take()
			for _, p := range tc.published {
				if !slices.Contains(writes, p) {
					t.Errorf("writes %v lack %q", writes, p)
				}
			}
			// What the fake API holds, not only what was attempted.
			var cm corev1.ConfigMap
			docErr := base.Get(ctx, r.opts.PeerSet, &cm)
			wantDoc := slices.Contains(tc.published, "create ConfigMap/"+peering.DefaultPeerSetName)
			if (docErr == nil) != wantDoc {
				t.Errorf("peer-set document present = %v, want %v", docErr == nil, wantDoc)
			}
			labels := peeringLabels(t, base)
			wantLabels := slices.Contains(tc.published, "patch Node/a")
			if (labels["a"] == "true") != wantLabels {
				t.Errorf("labels %v, want them published = %v", labels, wantLabels)
			}

			// The next pass, with the API back, converges.
			w.fail = nil
			if _, err := r.pass(ctx, ctrl.Log); err != nil {
				t.Fatalf("pass with the API back: %v", err)
			}
			if got := peeringLabels(t, base); !peeringEqualMaps(got, map[string]string{"a": "true", "b": "false", "c": "true"}) {
				t.Errorf("labels after the API came back: %v", got)
			}
		})
	}
}

// TestPeeringCalicoAPIGroup: the BGPPeer goes to the API group
// calico-node's confd reads (calico.ChooseAPIGroup), and the peer-set
// document says which and why in its annotations; an explicit group the
// API server does not serve writes no BGPPeer, is the pass's error, and
// the document says so. A second pass writes nothing.
func TestPeeringCalicoAPIGroup(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	v1, v3 := calico.BGPPeerGVK, calico.BGPPeerV3GVK
	for _, tc := range []struct {
		name    string
		served  []schema.GroupVersionKind
		setting string
		want    schema.GroupVersionKind // empty: no BGPPeer
		reason  string                  // in the annotation and, for an error, the pass's error
	}{
		{"only v1 served", []schema.GroupVersionKind{v1}, "", v1, "only crd.projectcalico.org is served"},
		{"only v3 served", []schema.GroupVersionKind{v3}, "", v3, "only projectcalico.org is served"},
		{"both served: v1 under auto, as confd reads", []schema.GroupVersionKind{v1, v3}, calico.APIGroupAuto, v1, "both groups are served"},
		{"both served, v3 forced", []schema.GroupVersionKind{v1, v3}, calico.APIGroupV3, v3, "set explicitly to projectcalico.org/v3"},
		{"only v3 served, v1 forced: an error", []schema.GroupVersionKind{v3}, calico.APIGroupV1, schema.GroupVersionKind{}, "does not serve crd.projectcalico.org"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &peeringWrites{}
			r, base := newPeeringServingCalico(t, w, tc.served, peeringPublishNodes()...)
			r.opts.Calico.APIGroup = tc.setting
			_, err := r.pass(ctx, ctrl.Log)
			switch {
			case tc.want.Empty() && (err == nil || !strings.Contains(err.Error(), "Calico BGPPeer: ") || !strings.Contains(err.Error(), tc.reason)):
				t.Fatalf("pass: err = %v, want the Calico BGPPeer's error saying %q", err, tc.reason)
			case !tc.want.Empty() && err != nil:
				t.Fatalf("pass: %v", err)
			}
			for _, gvk := range tc.served {
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(gvk)
				gerr := base.Get(ctx, client.ObjectKey{Name: calico.DefaultPeerName}, got)
				if wantIt := gvk == tc.want; (gerr == nil) != wantIt {
					t.Errorf("BGPPeer in %s: err = %v, want it written = %v", gvk.GroupVersion(), gerr, wantIt)
				}
			}
			var cm corev1.ConfigMap
			if err := base.Get(ctx, r.opts.PeerSet, &cm); err != nil {
				t.Fatalf("the peer-set document: %v", err)
			}
			wantGroup := ""
			if !tc.want.Empty() {
				wantGroup = tc.want.GroupVersion().String()
			}
			if g := cm.Annotations[calico.AnnotationAPIGroup]; g != wantGroup {
				t.Errorf("document annotation %s = %q, want %q", calico.AnnotationAPIGroup, g, wantGroup)
			}
			if why := cm.Annotations[calico.AnnotationAPIGroupReason]; !strings.Contains(why, tc.reason) {
				t.Errorf("document annotation %s = %q, want it to say %q", calico.AnnotationAPIGroupReason, why, tc.reason)
			}
			w.take()
			_, _ = r.pass(ctx, ctrl.Log)
			if again := w.take(); len(again) != 0 {
				t.Errorf("second pass wrote %v, want nothing", again)
			}
		})
	}
}

// TestPeeringCalicoAPIGroupFollowsTheCluster: when the v1 CRDs come to be
// served beside native v3 ones, the next pass writes the BGPPeer to v1,
// where a calico-node started now reads, and the document says so.
func TestPeeringCalicoAPIGroupFollowsTheCluster(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	w := &peeringWrites{}
	both := []schema.GroupVersionKind{calico.BGPPeerV3GVK, calico.BGPPeerGVK}
	r, base := newPeeringServingCalico(t, w, both, peeringPublishNodes()...)
	r.discovery = servedGroups(both[:1])
	if _, err := r.pass(ctx, ctrl.Log); err != nil {
		t.Fatal(err)
	}
	r.discovery = servedGroups(both)
	if _, err := r.pass(ctx, ctrl.Log); err != nil {
		t.Fatal(err)
	}
	writes := w.take()
	for _, want := range []string{"create BGPPeer/" + calico.DefaultPeerName, "update ConfigMap/" + peering.DefaultPeerSetName} {
		if !slices.Contains(writes, want) {
			t.Errorf("writes %v lack %q", writes, want)
		}
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(calico.BGPPeerGVK)
	if err := base.Get(ctx, client.ObjectKey{Name: calico.DefaultPeerName}, got); err != nil {
		t.Errorf("v1 BGPPeer after v1 came to be served: %v", err)
	}
	var cm corev1.ConfigMap
	if err := base.Get(ctx, r.opts.PeerSet, &cm); err != nil || cm.Annotations[calico.AnnotationAPIGroup] != calico.APIGroupV1 {
		t.Errorf("document annotations %v (%v), want %s", cm.Annotations, err, calico.APIGroupV1)
	}
}
