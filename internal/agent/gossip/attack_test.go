package gossip

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
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
