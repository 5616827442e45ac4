package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

// The cache sees a status write a moment after the API: the next pass's
// policy still has the version the write patched over. That pass writes
// on top of its own last write, with no conflict and no re-read (each
// would hold the next pass, and the next deadline, behind a round trip),
// and loses no record. A change by someone else wins as before.
func TestStatusWriteOnTopOfItsOwn(t *testing.T) {
	ctx := context.Background()
	policy := &v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p", Generation: 1}}
	var patches, rereads int
	c := countingPolicyClient(policy, &patches, &rereads)
	r := newRecoveryReconciler(c, c, RecoveryOptions{})
	var stale v1alpha1.RecoveryPolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &stale); err != nil {
		t.Fatal(err)
	}
	rec := func(pod string) v1alpha1.ActionRecord {
		return v1alpha1.ActionRecord{Time: metav1.NewTime(time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)), Action: "Delete", Pod: "ns/" + pod, Node: "n", Reason: "test", Result: rescue.ResultSucceeded}
	}
	rep := rescue.PolicyReport{Name: "p", Valid: true, Stranded: 2}

	// Pass 1 writes; pass 2 starts from the stale cached copy.
	if err := r.writeStatus(ctx, stale.DeepCopy(), rep, []v1alpha1.ActionRecord{rec("a")}); err != nil {
		t.Fatal(err)
	}
	if err := r.writeStatus(ctx, stale.DeepCopy(), rep, []v1alpha1.ActionRecord{rec("b")}); err != nil {
		t.Fatal(err)
	}
	if patches != 2 || rereads != 0 {
		t.Errorf("%d patches and %d re-reads for two writes over a lagging cache, want 2 and 0", patches, rereads)
	}
	var got v1alpha1.RecoveryPolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.RescuesTotal != 2 || len(got.Status.LastActions) != 2 {
		t.Errorf("status after two writes: rescuesTotal %d, lastActions %v; want both records", got.Status.RescuesTotal, got.Status.LastActions)
	}

	// Someone else changes the policy: the cache shows a version this
	// process did not write over, and it wins.
	got.Status.LastActions = nil
	got.Status.RescuesTotal = 7
	if err := c.Status().Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	var theirs v1alpha1.RecoveryPolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &theirs); err != nil {
		t.Fatal(err)
	}
	patches = 0
	if err := r.writeStatus(ctx, theirs.DeepCopy(), rep, []v1alpha1.ActionRecord{rec("c")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.RescuesTotal != 8 || len(got.Status.LastActions) != 1 {
		t.Errorf("after someone else's change: rescuesTotal %d, lastActions %v; want theirs plus one", got.Status.RescuesTotal, got.Status.LastActions)
	}
}

// During a rescue each pass changes the counts. A change without new
// records within statusMinInterval of the last write waits for a pass
// that statusPending brings back within that interval; records never
// wait.
func TestStatusCountsWaitRecordsDoNot(t *testing.T) {
	ctx := context.Background()
	policy := &v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p", Generation: 1}}
	var patches, rereads int
	c := countingPolicyClient(policy, &patches, &rereads)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC))
	r := newRecoveryReconciler(c, c, RecoveryOptions{Clock: clk})
	current := func() *v1alpha1.RecoveryPolicy {
		var p v1alpha1.RecoveryPolicy
		if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	rec := v1alpha1.ActionRecord{Time: metav1.NewTime(clk.Now()), Action: "Delete", Pod: "ns/a", Node: "n", Reason: "test", Result: rescue.ResultSucceeded}
	steps := []struct {
		name      string
		advance   time.Duration
		stranded  int
		recs      []v1alpha1.ActionRecord
		written   bool
		requeueBy time.Duration // 0: no status reason to come back
	}{
		{name: "first write", stranded: 3, recs: []v1alpha1.ActionRecord{rec}, written: true},
		{name: "counts change 200 ms later: wait", advance: 200 * time.Millisecond, stranded: 2, requeueBy: statusMinInterval},
		{name: "a record 100 ms later: at once", advance: 100 * time.Millisecond, stranded: 2, recs: []v1alpha1.ActionRecord{rec}, written: true},
		{name: "counts change 1 s later: written", advance: time.Second, stranded: 1, written: true},
		{name: "nothing changes: nothing written", advance: 100 * time.Millisecond, stranded: 1},
	}
	for _, st := range steps {
		clk.SetTime(clk.Now().Add(st.advance))
		before := patches
		if err := r.writeStatus(ctx, current(), rescue.PolicyReport{Name: "p", Valid: true, Stranded: st.stranded}, st.recs); err != nil {
			t.Fatal(err)
		}
		if got := patches > before; got != st.written {
			t.Errorf("%s: written %v, want %v", st.name, got, st.written)
		}
		res := r.requeue(rescue.Plan{}, time.Time{}, false, false)
		if res.RequeueAfter != st.requeueBy {
			t.Errorf("%s: next pass after %v, want %v", st.name, res.RequeueAfter, st.requeueBy)
		}
	}
	if got := current().Status; got.StrandedPods != 1 || got.RescuesTotal != 2 {
		t.Errorf("final status: stranded %d, rescues %d; want 1 and 2", got.StrandedPods, got.RescuesTotal)
	}
}

// countingPolicyClient is a fake API holding policy that counts the status
// patches and the lists (the re-reads after a conflict).
func countingPolicyClient(policy *v1alpha1.RecoveryPolicy, patches, lists *int) client.Client {
	return fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(policy).WithStatusSubresource(&v1alpha1.RecoveryPolicy{}).
		WithIndex(&v1alpha1.RecoveryPolicy{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				*patches++
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
				*lists++
				return c.List(ctx, l, opts...)
			},
		}).Build()
}

// A policy deleted and created again under its name is another object:
// this process's last write of the old one is never the base of a write
// of the new one, even at a resourceVersion the old one had.
func TestStatusWriteNotOnTopOfAnotherPolicy(t *testing.T) {
	ctx := context.Background()
	old := &v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-old", Generation: 1}}
	var patches, lists int
	c := countingPolicyClient(old, &patches, &lists)
	r := newRecoveryReconciler(c, c, RecoveryOptions{})
	var cached v1alpha1.RecoveryPolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &cached); err != nil {
		t.Fatal(err)
	}
	rec := v1alpha1.ActionRecord{Time: metav1.NewTime(time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)), Action: "Delete", Pod: "ns/a", Node: "n", Reason: "test", Result: rescue.ResultSucceeded}
	if err := r.writeStatus(ctx, cached.DeepCopy(), rescue.PolicyReport{Name: "p", Valid: true}, []v1alpha1.ActionRecord{rec}); err != nil {
		t.Fatal(err)
	}
	// The new policy, as a cache might show it: same name, the version the
	// write patched over, another UID.
	fresh := cached.DeepCopy()
	fresh.UID = "uid-new"
	if got := r.latest(fresh); got.UID != "uid-new" || got.Status.RescuesTotal != 0 {
		t.Errorf("latest() of a recreated policy = UID %s with %d rescues, want the cached new one", got.UID, got.Status.RescuesTotal)
	}
}
