//go:build !linux

package scenario

import (
	"fmt"
	"runtime"
)

// acceptQueueLen needs Linux's TCP_INFO; the lab's sandbox runs on Linux
// only, and elsewhere a host cannot be silenced.
func acceptQueueLen(uintptr) (int, error) {
	return 0, fmt.Errorf("the accept queue's length is read on Linux only, not %s", runtime.GOOS)
}
