//go:build linux

package watchdog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Linux is a watchdog device opened through the kernel's watchdog API
// (Documentation/watchdog/watchdog-api.rst).
type Linux struct {
	path    string
	info    Info
	mu      sync.Mutex
	f       *os.File
	timeout time.Duration
}

// Open opens the device at path (/dev/watchdog0), sets its timeout to
// timeout (whole seconds), reads it back, and checks it can fence
// (Verify). Opening starts the watchdog: on an error after the open, the
// device is disarmed again if it allows, so a node whose device cannot
// fence is never reset by it. The kernel lets one process open a device
// at a time, so while it is open the agent is its only writer.
func Open(path string, timeout time.Duration) (*Linux, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: %s is open in another process (another watchdog daemon?): the agent must be its only writer", ErrNotFencing, path)
		}
		return nil, fmt.Errorf("open watchdog: %w", err)
	}
	d := &Linux{path: path, f: f}
	info, err := d.read(timeout)
	if err == nil {
		err = Verify(path, info, timeout)
	}
	if err != nil {
		// Stop what the open started, if the driver lets us.
		_, _ = f.Write([]byte("V"))
		_ = f.Close()
		return nil, err
	}
	d.info, d.timeout = info, info.Timeout
	return d, nil
}

func (d *Linux) read(timeout time.Duration) (Info, error) {
	fd := int(d.f.Fd())
	wi, err := unix.IoctlGetWatchdogInfo(fd)
	if err != nil {
		if errors.Is(err, unix.ENOTTY) {
			return Info{}, fmt.Errorf("%w: %s is not a watchdog device", ErrNotFencing, d.path)
		}
		return Info{}, fmt.Errorf("read the watchdog's support (WDIOC_GETSUPPORT): %w", err)
	}
	info := Info{
		Identity:   string(bytes.TrimRight(wi.Identity[:], "\x00")),
		MagicClose: wi.Options&unix.WDIOF_MAGICCLOSE != 0,
		SetTimeout: wi.Options&unix.WDIOF_SETTIMEOUT != 0,
	}
	if info.SetTimeout {
		if err := unix.IoctlSetPointerInt(fd, unix.WDIOC_SETTIMEOUT, int(timeout/time.Second)); err != nil {
			return info, fmt.Errorf("set the watchdog's timeout (WDIOC_SETTIMEOUT): %w", err)
		}
	}
	secs, err := unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT)
	if err != nil {
		return info, fmt.Errorf("read the watchdog's timeout back (WDIOC_GETTIMEOUT): %w", err)
	}
	info.Timeout = time.Duration(secs) * time.Second
	info.NoReboot = strings.Contains(info.Identity, "Software Watchdog") && sysfsFlag("/sys/module/softdog/parameters/soft_noboot")
	info.Nowayout = sysfsFlag(filepath.Join("/sys/class/watchdog", deviceName(d.path), "nowayout"))
	return info, nil
}

// deviceName maps /dev/watchdog (the legacy name of the first device) and
// /dev/watchdogN to their sysfs names.
func deviceName(path string) string {
	if b := filepath.Base(path); b != "watchdog" {
		return b
	}
	return "watchdog0"
}

func sysfsFlag(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// Info returns what the kernel said of the device.
func (d *Linux) Info() Info { return d.info }

// Timeout implements Device.
func (d *Linux) Timeout() time.Duration { return d.timeout }

// Keepalive implements Device (WDIOC_KEEPALIVE).
func (d *Linux) Keepalive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return os.ErrClosed
	}
	if err := unix.IoctlWatchdogKeepalive(int(d.f.Fd())); err != nil {
		return fmt.Errorf("feed the watchdog (WDIOC_KEEPALIVE): %w", err)
	}
	return nil
}

// Disarm implements Device: the magic character, then close.
func (d *Linux) Disarm() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return os.ErrClosed
	}
	_, werr := d.f.Write([]byte("V"))
	cerr := d.f.Close()
	d.f = nil
	return errors.Join(werr, cerr)
}

// Close implements Device: close without the magic character.
func (d *Linux) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}

// BootClock reads CLOCK_BOOTTIME: monotonic, and counting the time the
// machine was suspended or paused, so that a sanction never outlives a
// pause on the agent's clock. The fencing rules read only this clock.
func BootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists since Linux 2.6.39; without it nothing is
		// sanctioned for long: the monotonic clock is the closest.
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	}
	return time.Duration(ts.Nano())
}
