package watchdogstandin

import (
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"rebound/internal/agent/watchdog"
)

var _ watchdog.Device = (*Device)(nil)

func TestStandIn(t *testing.T) {
	const w = 10 * time.Second
	for _, tc := range []struct {
		name      string
		run       func(c *clocktesting.FakeClock, d *Device)
		wantReset bool
	}{
		{"fed every W/2: no reset", func(c *clocktesting.FakeClock, d *Device) {
			for range 10 {
				c.Step(w / 2)
				if err := d.Keepalive(); err != nil {
					t.Fatal(err)
				}
			}
		}, false},
		{"not fed for W: reset", func(c *clocktesting.FakeClock, d *Device) { c.Step(w) }, true},
		{"a keepalive postpones by W, not more", func(c *clocktesting.FakeClock, d *Device) {
			c.Step(w - time.Second)
			_ = d.Keepalive()
			c.Step(w)
		}, true},
		{"disarmed: never", func(c *clocktesting.FakeClock, d *Device) { _ = d.Disarm(); c.Step(10 * w) }, false},
		{"closed without the magic close: reset", func(c *clocktesting.FakeClock, d *Device) { _ = d.Close(); c.Step(w) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clocktesting.NewFakeClock(time.Unix(0, 0))
			var resets atomic.Int32
			d := Open(c, w, func() { resets.Add(1) })
			tc.run(c, d)
			if got := resets.Load() > 0; got != tc.wantReset || d.Fired() != tc.wantReset {
				t.Fatalf("reset %v (%d calls), want %v", got, resets.Load(), tc.wantReset)
			}
			if resets.Load() > 1 {
				t.Fatalf("reset %d times, want once", resets.Load())
			}
			if tc.wantReset && d.Keepalive() == nil {
				t.Fatal("a keepalive after the reset succeeded")
			}
		})
	}
}
