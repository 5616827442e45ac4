// Package watchdogstandin stands in for a node's watchdog device in the
// lab, where a kwok node has no kernel to reset: it implements the
// agent's watchdog.Device, and when it is not fed for its timeout it
// calls the lab's reset of the node (its heartbeats stop, its host goes
// silent, its agent dies; it comes back later on a new boot). The agent's
// rule, cadence and disarm protocol are the same code as on a real node;
// no fencing logic lives here.
package watchdogstandin

import (
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Device is one node's stand-in watchdog. It starts counting when opened.
type Device struct {
	timeout time.Duration
	reset   func()
	clock   clock.WithDelayedExecution

	mu     sync.Mutex
	timer  clock.Timer
	state  state
	resets int
}

type state int

const (
	counting state = iota
	disarmed
	fired
)

// Open starts a stand-in that calls reset once if not fed for timeout.
func Open(c clock.WithDelayedExecution, timeout time.Duration, reset func()) *Device {
	d := &Device{timeout: timeout, reset: reset, clock: c}
	d.timer = c.AfterFunc(timeout, d.fire)
	return d
}

func (d *Device) fire() {
	d.mu.Lock()
	if d.state != counting {
		d.mu.Unlock()
		return
	}
	d.state = fired
	d.resets++
	d.mu.Unlock()
	d.reset()
}

// Timeout implements watchdog.Device.
func (d *Device) Timeout() time.Duration { return d.timeout }

// ErrFired: the stand-in already reset its node; a keepalive is too late.
var ErrFired = errors.New("the watchdog already reset the node")

// Keepalive implements watchdog.Device.
func (d *Device) Keepalive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case fired:
		return ErrFired
	case disarmed:
		return errors.New("the watchdog is disarmed")
	}
	d.timer.Stop()
	d.timer = d.clock.AfterFunc(d.timeout, d.fire)
	return nil
}

// Disarm implements watchdog.Device: the magic close.
func (d *Device) Disarm() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == fired {
		return ErrFired
	}
	d.state = disarmed
	d.timer.Stop()
	return nil
}

// Close implements watchdog.Device: without the magic close the stand-in
// keeps counting, as a real watchdog does.
func (d *Device) Close() error { return nil }

func (d *Device) counting() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == counting
}

// Fired reports whether the stand-in reset its node.
func (d *Device) Fired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == fired
}
