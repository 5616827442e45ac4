package gossip

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestHostProbeAttack: how a host probe's dial error is read, one row per
// way the watcher itself, not the watched host, makes the dial fail. The
// rule (docs/detection.md, "What a vote means"): a probe that failed
// locally is not reported; only a silent host makes a Dead vote. The
// errors are built as net.Dialer returns them (an *net.OpError around an
// *os.SyscallError from connect), so no packet leaves the machine.
func TestHostProbeAttack(t *testing.T) {
	dialErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want HostAnswer
	}{
		// A watcher whose own node network is dying (its interface down,
		// its routes withdrawn) gets ENETUNREACH from connect at once,
		// before anything is sent: it learnt nothing of the host, yet it
		// votes Dead on every member it watches whose ping it also lost,
		// and with the API on another network its Lease keeps it a voter.
		{name: "a watcher whose own route is gone (ENETUNREACH from connect, nothing sent): no vote", err: dialErr(syscall.ENETUNREACH), want: HostUnknown},
		{name: "held: a local firewall refuses to send (EPERM): no vote", err: dialErr(syscall.EPERM), want: HostUnknown},
		{name: "held: the watcher's own interface down (ENETDOWN): no vote", err: dialErr(syscall.ENETDOWN), want: HostUnknown},
		{name: "held: the watcher's own source address gone (EADDRNOTAVAIL): no vote", err: dialErr(syscall.EADDRNOTAVAIL), want: HostUnknown},
		{name: "held: refused by the host's kernel: it answers", err: dialErr(syscall.ECONNREFUSED), want: HostAnswers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyDial(context.Background(), tc.err); got != tc.want {
				t.Fatalf("classifyDial(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

// TestTrackerAttack: the watch state a watcher reports, one row per
// sequence of probe outcomes. The controller refutes a Dead vote whose
// since is before a Lease renewal it watched (the kubelet reached the API
// after the watcher called the node dead): that is its only defence
// against a broken probe path to a live host, and it rests on since
// being the start of the death as this watcher saw it.
func TestTrackerAttack(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name      string
		outcomes  []probeResult // one probe each, two seconds apart from +4 s
		wantState string
		wantSince time.Time
	}{
		// A host probe that learnt nothing in between (a local EPERM, the
		// book's Node briefly without an address) never saw the host
		// answer, yet it restarts the death: a probe path broken for
		// minutes reports a death seconds old, after the last renewal,
		// and is never refuted nor distrusted.
		{name: "silent, unknown, silent: the death began at the first silence", outcomes: []probeResult{hostSilent, hostUnknown, hostSilent},
			wantState: liveness.GossipDead, wantSince: at(4)},
		{name: "held: silent twice: since the first", outcomes: []probeResult{hostSilent, hostSilent},
			wantState: liveness.GossipDead, wantSince: at(4)},
		{name: "held: the host answered in between: MemberDown, then a new death", outcomes: []probeResult{hostSilent, hostAnswered, hostSilent},
			wantState: liveness.GossipDead, wantSince: at(8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, target := ringOf(t, "node-a", "node-b", "node-c", "node-d", "node-e", "node-f")
			tr.dead(target, at(2))
			for i, r := range tc.outcomes {
				tr.probed(target, r, at(4+2*i))
			}
			w, ok := stateOf(tr, target)
			if !ok || w.State != tc.wantState || !w.Since.Equal(tc.wantSince) {
				t.Fatalf("reported %+v (reported %v), want %s since %s", w, ok, tc.wantState, tc.wantSince)
			}
		})
	}
}
