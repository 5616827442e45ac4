//go:build !linux

package watchdog

import (
	"fmt"
	"time"
)

// Open fails off Linux: the watchdog API is Linux's.
func Open(path string, timeout time.Duration) (Device, error) {
	return nil, fmt.Errorf("%w: watchdog devices are opened on Linux only", ErrNotFencing)
}

var processStart = time.Now()

// BootClock off Linux counts from the process's start: no watchdog can be
// opened there (Open fails), so it never times a sanction that feeds one.
func BootClock() time.Duration { return time.Since(processStart) }
