// Package fencing is the decision core of watchdog self-fencing: the rule
// by which a node's agent may feed its watchdog (Sanction), and the rule
// by which the controller may put node.kubernetes.io/out-of-service on a
// node and force-delete its stateful pods (Fencer). Both are pure: times
// are readings of the caller's own monotonic boot clock, passed in, never
// compared across machines.
//
// The two rules are built so that one implies the other's safety: a node
// may feed only while the API shows its Lease being renewed, or while a
// strict majority of its member list answers its probes; the controller
// fences only after a strict majority of that same list has testified to
// hearing nothing from the node since before the controller's own read of
// the unchanged Lease, and after waiting longer than any sanction the node
// could hold plus its watchdog's timeout. Every strict majority of a list
// meets every other in one member, and that member cannot both have
// answered the node and have heard nothing from it. docs/fencing.md has
// the argument in full; the model test drives both rules over every
// partition and checks it.
package fencing

import (
	"errors"
	"fmt"
	"time"
)

// Timing is what an agent's watchdog promises, and what the controller
// must wait out before it may fence the agent's node.
type Timing struct {
	// Watchdog is W, the watchdog's timeout as read back from the device:
	// the node resets at most W after its last keepalive.
	Watchdog time.Duration `json:"watchdog"`
	// Sanction is T, how long one proof of being wanted lets the agent
	// feed: it counts from the send of the earlier of the two Lease reads
	// that saw a renewal, or from the send of the probes a majority of the
	// members answered.
	Sanction time.Duration `json:"sanction"`
}

// Defaults, for upstream's kubelet timings (renew every 10 s, Lease 40 s).
const (
	// DefaultWatchdogTimeout: W. Hardware watchdogs count in whole
	// seconds; 10 s leaves an agent stalled by a busy node several
	// keepalives of slack.
	DefaultWatchdogTimeout = 10 * time.Second
	// DefaultSanctionWindow: T. A Lease renewal is seen at most the
	// kubelet's 10 s renew interval plus two Lease polls plus a retry
	// after the last one, so the Lease alone keeps a healthy node fed.
	DefaultSanctionWindow = 16 * time.Second
	// DefaultPollInterval: how often the agent reads its node's Lease by
	// quorum, and probes its members.
	DefaultPollInterval = 2 * time.Second
	// DefaultFenceMargin: what the controller waits beyond T + 2W, for
	// the write of a keepalive, the device's rounding and the scheduling
	// of the agent's loop.
	DefaultFenceMargin = 3 * time.Second
	// ClockRateBound: how far any machine's boot clock may run fast or
	// slow against real time. Crystal oscillators drift by parts per
	// million; 1 % also covers a virtual machine's clock catching up.
	ClockRateBound = 0.01
	// DefaultKubeletRenewInterval is the kubelet's Lease renew interval
	// (a quarter of its 40 s nodeLeaseDurationSeconds).
	DefaultKubeletRenewInterval = 10 * time.Second
)

// MaxTiming is the longest W and T a report can carry (the
// PeeringReport CRD's bound): an agent whose report cannot say its timing
// must not arm.
const MaxTiming = 600 * time.Second

// DefaultTiming is the timing agents report unless configured otherwise.
func DefaultTiming() Timing {
	return Timing{Watchdog: DefaultWatchdogTimeout, Sanction: DefaultSanctionWindow}
}

// Validate checks that the timing can keep a healthy node fed: a Lease
// renewed every renewInterval and read every poll must be seen renewed
// again before one sanction runs out, with one retry to spare. The field
// names are the agent's flags.
func (t Timing) Validate(renewInterval, poll time.Duration) error {
	var errs []error
	if t.Watchdog < time.Second {
		errs = append(errs, fmt.Errorf("--watchdog-timeout=%s: must be at least 1s (watchdog devices count whole seconds)", t.Watchdog))
	}
	if t.Watchdog%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--watchdog-timeout=%s: must be whole seconds, as the device sets it", t.Watchdog))
	}
	if t.Sanction%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--sanction-window=%s: must be whole seconds, as the report carries it", t.Sanction))
	}
	if t.Watchdog > MaxTiming || t.Sanction > MaxTiming {
		errs = append(errs, fmt.Errorf("--watchdog-timeout=%s, --sanction-window=%s: must be at most %s, as the report carries them", t.Watchdog, t.Sanction, MaxTiming))
	}
	if poll <= 0 {
		errs = append(errs, fmt.Errorf("--fencing-poll-interval=%s: must be positive", poll))
	}
	if min := renewInterval + 3*poll; t.Sanction < min {
		errs = append(errs, fmt.Errorf("--sanction-window=%s: must be at least the kubelet's renew interval (%s) plus three polls (%s each), %s; "+
			"a shorter window lets a healthy node whose peers are cut off reset between two renewals", t.Sanction, renewInterval, poll, min))
	}
	if poll > 0 && t.Watchdog > 0 && t.Watchdog < 2*poll {
		errs = append(errs, fmt.Errorf("--watchdog-timeout=%s: must be at least two polls (%s); the agent feeds once a poll", t.Watchdog, 2*poll))
	}
	return errors.Join(errs...)
}

// FenceWait is how long after its own read of the unchanged Lease the
// controller waits before it opens a fencing round: any sanction the node
// held then has run out (T, on a clock that may run slow), the last
// keepalive it allowed has expired (W), and W more covers a keepalive
// written while the sanction's last W was being checked. The rate bound
// applies to both clocks, the node's and the controller's.
func (t Timing) FenceWait(margin time.Duration) time.Duration {
	return stretch(t.Sanction+2*t.Watchdog, 2) + margin
}

// stretch returns d measured on a clock that may run fast by the rate
// bound, n times over: a duration that is at least d on every clock.
func stretch(d time.Duration, n int) time.Duration {
	f := 1.0
	for range n {
		f *= 1 + ClockRateBound
	}
	return time.Duration(float64(d)*f) + 1
}
