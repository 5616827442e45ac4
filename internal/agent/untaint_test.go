package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"rebound/pkg/unreachable"
)

// TestUntaintDue: the rule, row by row; every time is the agent's own.
func TestUntaintDue(t *testing.T) {
	const after = 10 * time.Second
	at := func(d time.Duration) time.Time { return agentT0.Add(d) }
	for _, tc := range []struct {
		name  string
		s     untaintState
		now   time.Time
		due   bool
		next  time.Time
		words string
	}{
		{name: "no taint: nothing",
			s: untaintState{Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(0)}, now: at(time.Minute), words: "no rebound.dev/unreachable"},
		{name: "tainted, Ready, the Lease never seen renewing since (the agent only listed an old Lease): the verdict stands",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0)}, now: at(time.Hour), words: "not seen renewed"},
		{name: "tainted, NotReady in the API, its Lease renewing: the mark dates the incident, upstream's taint keeps pods off",
			s: untaintState{Tainted: true, RenewedSince: at(0), LastRenewal: at(time.Hour - time.Second)}, now: at(time.Hour), words: "NotReady in the API"},
		{name: "tainted, Ready, renewing since 9.9 s: the controller still has time",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(8 * time.Second), LeaseDuration: 40 * time.Second}, now: at(9900 * time.Millisecond),
			next: at(after), words: "the controller has until"},
		{name: "tainted, Ready, renewing since 10 s: taken off",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(8 * time.Second), LeaseDuration: 40 * time.Second}, now: at(after),
			due: true, words: "no controller took it off"},
		{name: "renewing for a minute, Ready only 5 s ago: the controller's rule starts at Ready, so does its time",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(55 * time.Second), RenewedSince: at(0), LastRenewal: at(58 * time.Second), LeaseDuration: 40 * time.Second}, now: at(time.Minute),
			next: at(65 * time.Second), words: "the controller has until"},
		{name: "renewed once, then the Lease stopped for longer than its duration: the kubelet is gone again, the taint stays",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(0), LeaseDuration: 8 * time.Second}, now: at(time.Minute),
			words: "stale by the controller's rule"},
		// The controller's rule, not the Lease's duration: not renewed
		// for 20 s of a 40 s Lease renewed every 10 s is stale to the
		// controller (10 s plus its 2 s margin), so its verdict may
		// stand; the agent must not call it renewing.
		{name: "not renewed for 20 s of a 40 s Lease: stale by the controller's rule, the taint stays",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(0), LeaseDuration: 40 * time.Second}, now: at(20 * time.Second),
			words: "stale by the controller's rule"},
		{name: "a Lease without a duration counts the kubelet's 40 s: renewed 11 s ago, not stale yet",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(0)}, now: at(11 * time.Second), due: true},
		{name: "a Lease without a duration counts the kubelet's 40 s: renewed 12 s ago, stale",
			s: untaintState{Tainted: true, Ready: true, ReadySince: at(0), RenewedSince: at(0), LastRenewal: at(0)}, now: at(12 * time.Second), words: "stale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, next, why := untaintDue(tc.s, tc.now, after)
			if due != tc.due || !next.Equal(tc.next) {
				t.Errorf("untaintDue = %v, next %v (%s); want %v, next %v", due, next, why, tc.due, tc.next)
			}
			if !strings.Contains(why, tc.words) {
				t.Errorf("why %q does not say %q", why, tc.words)
			}
		})
	}
}

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// untaintHarness runs an untainter of node-a against a fake clientset and
// a fake clock.
type untaintHarness struct {
	t     *testing.T
	cs    *fake.Clientset
	u     *Untainter
	clock *clocktesting.FakeClock
	renew time.Time
}

func taintedNode(name string, added time.Time) *corev1.Node {
	n := node(name, "10.0.0.1", true)
	n.ResourceVersion = "1"
	n.Spec.Taints = []corev1.Taint{
		{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
		{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: added}},
	}
	return n
}

func nodeLease(name string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: renew}},
	}
}

func startUntainter(t *testing.T, objs ...runtime.Object) *untaintHarness {
	t.Helper()
	cs := fake.NewClientset(objs...)
	clk := clocktesting.NewFakeClock(agentT0)
	u, _ := startUntainterOn(t, cs, clk)
	return &untaintHarness{t: t, cs: cs, u: u, clock: clk, renew: agentT0.Add(-time.Hour)}
}

func (h *untaintHarness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not true within 10 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// renewLease writes a new renewTime as the kubelet does, and waits until
// the untainter has seen it and judged again.
func (h *untaintHarness) renewLease(name string) {
	h.t.Helper()
	h.renew = h.renew.Add(10 * time.Second)
	l := nodeLease(name, h.renew)
	h.settled(func() {
		if err := h.cs.Tracker().Update(leasesGVR, l, NodeLeaseNamespace); err != nil {
			h.t.Fatal(err)
		}
	})
}

// settled runs change and waits until the untainter has judged after it.
func (h *untaintHarness) settled(change func()) {
	h.t.Helper()
	h.u.mu.Lock()
	before := h.u.passes
	h.u.mu.Unlock()
	change()
	h.waitFor("a pass after the change", func() bool {
		h.u.mu.Lock()
		defer h.u.mu.Unlock()
		return h.u.passes > before
	})
}

// step moves the agent's clock once its timer waits.
func (h *untaintHarness) step(d time.Duration) {
	h.t.Helper()
	h.waitFor("a timer", h.clock.HasWaiters)
	h.clock.Step(d)
}

func (h *untaintHarness) taints(name string) []corev1.Taint {
	h.t.Helper()
	o, err := h.cs.Tracker().Get(nodesGVR, "", name)
	if err != nil {
		h.t.Fatal(err)
	}
	return o.(*corev1.Node).Spec.Taints
}

func nodePatches(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p.GetName())
		}
	}
	return out
}

// TestUntainterTakesALeftoverTaintOff: node-a was marked, the controller
// is gone, and node-a's Lease renews again. Once the taint has outlived a
// renewal by --untaint-after on the agent's clock, the agent takes it off,
// and only it (the other taint stays, node-b is never touched); a second
// pass writes nothing.
func TestUntainterTakesALeftoverTaintOff(t *testing.T) {
	// The mark's timeAdded, on the controller's clock an hour ahead, is
	// never read.
	h := startUntainter(t, taintedNode("node-a", agentT0.Add(time.Hour)), taintedNode("node-b", agentT0.Add(-time.Hour)),
		nodeLease("node-a", agentT0.Add(-time.Hour)), nodeLease("node-b", agentT0.Add(-time.Hour)))
	h.renewLease("node-a")
	h.step(9 * time.Second)
	h.renewLease("node-a")
	if got := nodePatches(h.cs); len(got) != 0 {
		t.Fatalf("patched %v 9 s after the renewal, before --untaint-after", got)
	}
	h.step(time.Second)
	h.waitFor("the taint off", func() bool {
		return unreachable.Tainted(&corev1.Node{Spec: corev1.NodeSpec{Taints: h.taints("node-a")}}) == nil
	})
	if got := h.taints("node-a"); len(got) != 1 || got[0].Key != "dedicated" {
		t.Errorf("node-a's taints %v, want dedicated alone", got)
	}
	if got := h.taints("node-b"); len(got) != 2 {
		t.Errorf("node-b's taints %v: node-a's agent touched them", got)
	}
	if got := nodePatches(h.cs); len(got) != 1 || got[0] != "node-a" {
		t.Errorf("patches %v, want node-a once", got)
	}
	h.waitFor("one removal counted", func() bool { return h.u.Removals() == 1 })
	h.renewLease("node-a")
	h.clock.Step(time.Minute)
	if got := nodePatches(h.cs); len(got) != 1 {
		t.Errorf("patches %v after the taint was off, want node-a once", got)
	}
}

// TestUntainterLeavesTheVerdict: the rows where the taint must stay.
func TestUntainterLeavesTheVerdict(t *testing.T) {
	t.Run("the Lease not renewing: only the old Lease listed at start, however old the mark", func(t *testing.T) {
		h := startUntainter(t, taintedNode("node-a", agentT0.Add(-24*time.Hour)), nodeLease("node-a", agentT0.Add(-time.Hour)))
		h.clock.Step(time.Hour)
		time.Sleep(20 * time.Millisecond)
		if got := nodePatches(h.cs); len(got) != 0 {
			t.Errorf("patched %v with no renewal seen", got)
		}
	})
	t.Run("renewed once, then stopped again past its duration: the node is gone again", func(t *testing.T) {
		h := startUntainter(t, taintedNode("node-a", agentT0), nodeLease("node-a", agentT0.Add(-time.Hour)))
		h.renewLease("node-a")
		h.step(time.Minute)
		time.Sleep(20 * time.Millisecond)
		if got := nodePatches(h.cs); len(got) != 0 {
			t.Errorf("patched %v a minute after the last renewal of a 40 s Lease", got)
		}
	})
	t.Run("NotReady in the API, its Lease renewing: the mark stays until Ready, then the controller has its time", func(t *testing.T) {
		n := taintedNode("node-a", agentT0)
		n.Status.Conditions[0].Status = corev1.ConditionFalse
		h := startUntainter(t, n, nodeLease("node-a", agentT0.Add(-time.Hour)))
		h.renewLease("node-a")
		h.clock.Step(time.Minute)
		h.renewLease("node-a")
		time.Sleep(20 * time.Millisecond)
		if got := nodePatches(h.cs); len(got) != 0 {
			t.Fatalf("patched %v while node-a is NotReady", got)
		}
		n = taintedNode("node-a", agentT0)
		n.ResourceVersion = "2"
		h.settled(func() {
			if err := h.cs.Tracker().Update(nodesGVR, n, ""); err != nil {
				t.Fatal(err)
			}
		})
		h.step(9 * time.Second)
		h.renewLease("node-a")
		time.Sleep(20 * time.Millisecond)
		if got := nodePatches(h.cs); len(got) != 0 {
			t.Fatalf("patched %v 9 s after node-a turned Ready", got)
		}
		h.step(time.Second)
		h.waitFor("the taint off", func() bool { return len(h.taints("node-a")) == 1 })
	})
	t.Run("the controller takes it off first: the agent writes nothing", func(t *testing.T) {
		h := startUntainter(t, taintedNode("node-a", agentT0), nodeLease("node-a", agentT0.Add(-time.Hour)))
		h.renewLease("node-a")
		n := taintedNode("node-a", agentT0)
		n.Spec.Taints, _ = unreachable.WithoutTaint(n.Spec.Taints)
		n.ResourceVersion = "2"
		h.settled(func() {
			if err := h.cs.Tracker().Update(nodesGVR, n, ""); err != nil {
				t.Fatal(err)
			}
		})
		h.clock.Step(time.Minute)
		time.Sleep(20 * time.Millisecond)
		if got := nodePatches(h.cs); len(got) != 0 {
			t.Errorf("patched %v after the controller took the taint off", got)
		}
	})
	t.Run("the agent restarted: the old process's renewals do not count, a fresh one does", func(t *testing.T) {
		cs := fake.NewClientset(taintedNode("node-a", agentT0), nodeLease("node-a", agentT0.Add(-time.Hour)))
		clk := clocktesting.NewFakeClock(agentT0)
		first, stop := startUntainterOn(t, cs, clk)
		h := &untaintHarness{t: t, cs: cs, u: first, clock: clk, renew: agentT0.Add(-time.Hour)}
		h.renewLease("node-a")
		h.step(5 * time.Second)
		stop()
		h.u, _ = startUntainterOn(t, cs, clk)
		clk.Step(time.Hour)
		time.Sleep(20 * time.Millisecond)
		if got := nodePatches(cs); len(got) != 0 {
			t.Fatalf("patched %v: the restarted agent counted a renewal it never saw", got)
		}
		h.renewLease("node-a")
		h.step(10 * time.Second)
		h.waitFor("the taint off", func() bool { return len(h.taints("node-a")) == 1 })
	})
}

// startUntainterOn runs an untainter of node-a on the given fakes until
// stop (or the test's end).
func startUntainterOn(t *testing.T, cs *fake.Clientset, clk *clocktesting.FakeClock) (u *Untainter, stop func()) {
	t.Helper()
	u = NewUntainter(Options{NodeName: "node-a", Client: cs, Clock: clk, UntaintAfter: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(10 * time.Second)
	for !u.Synced() {
		if time.Now().After(deadline) {
			t.Fatal("the untainter did not sync")
		}
		time.Sleep(2 * time.Millisecond)
	}
	return u, stop
}

// TestUntainterRetries: a refused patch is retried on the retry timer,
// doubling, until it works; the error is kept for the log.
func TestUntainterRetries(t *testing.T) {
	h := startUntainter(t, taintedNode("node-a", agentT0), nodeLease("node-a", agentT0.Add(-time.Hour)))
	var failures atomic.Int32
	failures.Store(2)
	h.cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	h.renewLease("node-a")
	h.step(10 * time.Second)
	h.waitFor("the first attempt", func() bool { return len(nodePatches(h.cs)) == 1 })
	h.waitFor("the error kept", func() bool { return strings.Contains(h.u.LastError(), "connection refused") })
	h.step(time.Second)
	h.waitFor("the second attempt", func() bool { return len(nodePatches(h.cs)) == 2 })
	// The kubelet renews every 10 s: the Lease stays fresh (the
	// controller's rule, 12 s) through the retries.
	h.renewLease("node-a")
	h.step(time.Second)
	time.Sleep(20 * time.Millisecond)
	if n := len(nodePatches(h.cs)); n != 2 {
		t.Fatalf("%d attempts 1 s after the second failure: the delay must double", n)
	}
	h.step(time.Second)
	h.waitFor("the taint off", func() bool { return len(h.taints("node-a")) == 1 })
	h.waitFor("the error cleared after the success", func() bool { return h.u.LastError() == "" })
}

// TestUntaintOptions: a gossiping agent runs the untainter unless
// --untaint-after is 0; a negative value is refused, by its flag.
func TestUntaintOptions(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	base := Options{NodeName: "node-a", GossipOnly: true, Gossip: GossipOptions{KeyFile: key, BindAddress: netip.MustParseAddr("127.0.0.1"), Join: []string{"127.0.0.1:7946"}}, Client: fake.NewClientset()}
	for _, tc := range []struct {
		after time.Duration
		runs  bool
	}{{DefaultUntaintAfter, true}, {0, false}} {
		o := base
		o.UntaintAfter = tc.after
		a, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Untainter() != nil; got != tc.runs {
			t.Errorf("--untaint-after=%v: untainter %v, want %v", tc.after, got, tc.runs)
		}
	}
	o := base
	o.UntaintAfter = -time.Second
	if err := o.WithDefaults().ValidateFlags(); err == nil || !strings.Contains(err.Error(), "--untaint-after") {
		t.Errorf("--untaint-after=-1s: %v, want an error naming the flag", err)
	}
}
