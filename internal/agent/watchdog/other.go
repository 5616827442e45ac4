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
