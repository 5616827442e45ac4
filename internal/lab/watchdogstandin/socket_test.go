package watchdogstandin

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestSocket: the agent's side (Dial) drives the stand-in served in the
// lab's process as it drives a device: a graceful disarm stops it; a
// connection that drops without one (an agent killed) leaves it counting,
// and it resets the node; an agent restarted meanwhile opens the same,
// still counting, device.
func TestSocket(t *testing.T) {
	const w = 10 * time.Second
	for _, tc := range []struct {
		name      string
		run       func(t *testing.T, c *clocktesting.FakeClock, open func() deviceLike)
		wantReset bool
	}{
		{"fed, then disarmed: never", func(t *testing.T, c *clocktesting.FakeClock, open func() deviceLike) {
			d := open()
			c.Step(w / 2)
			must(t, d.Keepalive())
			must(t, d.Disarm())
			c.Step(10 * w)
		}, false},
		{"the agent dies (no magic close): reset after W", func(t *testing.T, c *clocktesting.FakeClock, open func() deviceLike) {
			d := open()
			must(t, d.Keepalive())
			must(t, d.Close())
			c.Step(w)
		}, true},
		{"restarted agent opens the counting device: reset W after the last keepalive", func(t *testing.T, c *clocktesting.FakeClock, open func() deviceLike) {
			d := open()
			must(t, d.Close())
			c.Step(w - time.Second)
			_ = open() // opens, does not feed
			c.Step(time.Second)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clocktesting.NewFakeClock(time.Unix(0, 0))
			var resets atomic.Int32
			s, err := Listen(filepath.Join(t.TempDir(), "wd.sock"), c, func() { resets.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			open := func() deviceLike {
				d, err := Dial(s.Path())(w)
				if err != nil {
					t.Fatal(err)
				}
				if d.Timeout() != w {
					t.Fatalf("timeout read back %s, want %s", d.Timeout(), w)
				}
				return d
			}
			tc.run(t, c, open)
			if got := resets.Load() > 0; got != tc.wantReset || (s.Resets() > 0) != tc.wantReset {
				t.Fatalf("reset %v (%d), want %v", got, s.Resets(), tc.wantReset)
			}
			if tc.wantReset {
				if _, err := Dial(s.Path())(w); err == nil {
					t.Fatal("opened the stand-in after it reset the node, before the lab brought the node back")
				}
				s.Rearm()
				if _, err := Dial(s.Path())(w); err != nil {
					t.Fatalf("open after the node came back: %v", err)
				}
			}
		})
	}
	if _, err := Dial(filepath.Join(t.TempDir(), "none"))(w); err == nil {
		t.Fatal("Dial of no socket succeeded")
	}
	if _, err := Dial("unused")(1500 * time.Millisecond); err == nil {
		t.Fatal("a timeout that is not whole seconds was accepted")
	}
}

type deviceLike interface {
	Timeout() time.Duration
	Keepalive() error
	Disarm() error
	Close() error
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
