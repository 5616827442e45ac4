// Package watchdog is the agent's hold on its node's watchdog: a device
// that resets the node unless it is fed, which the agent feeds only while
// the fencing rule (pkg/fencing.Sanction) allows. The Linux implementation
// opens a watchdog device through the kernel's watchdog API; the lab's
// stand-in implements the same Device. No fencing rule lives here: this
// package only opens, checks, feeds and disarms.
package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Device is an armed watchdog.
type Device interface {
	// Timeout is W, the timeout the device read back after it was set.
	Timeout() time.Duration
	// Keepalive postpones the reset by Timeout.
	Keepalive() error
	// Disarm writes the magic close and closes the device: the watchdog
	// stops. Call it only as the fencing rule allows.
	Disarm() error
	// Close closes the device without the magic close: the watchdog keeps
	// counting and resets the node unless another process feeds it.
	Close() error
}

// Info is what the kernel says of a device, read when it is opened.
type Info struct {
	// Identity is the driver's name (WDIOC_GETSUPPORT).
	Identity string
	// MagicClose: the driver stops only on the magic close
	// (WDIOF_MAGICCLOSE), so a crash of the agent is not a disarm.
	MagicClose bool
	// SetTimeout: the driver's timeout can be set (WDIOF_SETTIMEOUT).
	SetTimeout bool
	// Timeout is the timeout read back (WDIOC_GETTIMEOUT) after setting it.
	Timeout time.Duration
	// NoReboot: the driver only logs on expiry instead of resetting
	// (softdog's soft_noboot=1).
	NoReboot bool
	// Nowayout: the driver can never be stopped once opened.
	Nowayout bool
}

// ErrNotFencing wraps every reason a device cannot be used for fencing.
var ErrNotFencing = errors.New("watchdog cannot fence")

// Verify checks that a device as info describes can fence its node with
// timeout want: it resets (not only logs), it tells the magic close from
// a crash, and its timeout is the one asked for. The agent reports itself
// armed only with a device that passes.
func Verify(path string, info Info, want time.Duration) error {
	var errs []string
	if !info.MagicClose {
		errs = append(errs, "the driver does not support the magic close (WDIOF_MAGICCLOSE): an agent that crashes would stop it as a graceful stop does")
	}
	if !info.SetTimeout {
		errs = append(errs, "the driver's timeout cannot be set (WDIOF_SETTIMEOUT)")
	} else if info.Timeout != want {
		errs = append(errs, fmt.Sprintf("the driver set its timeout to %s when asked for %s: set --watchdog-timeout to a value the device supports", info.Timeout, want))
	}
	if info.NoReboot {
		errs = append(errs, "the driver does not reset the node on expiry (softdog's soft_noboot=1): load softdog with soft_noboot=0")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s (%s): %s", ErrNotFencing, path, info.Identity, strings.Join(errs, "; "))
}
