//go:build linux

package watchdog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOpenRefusesAFileThatIsNotAWatchdog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "watchdog0")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, 10*time.Second)
	if !errors.Is(err, ErrNotFencing) || !strings.Contains(err.Error(), "not a watchdog device") {
		t.Fatalf("Open on a regular file: %v, want ErrNotFencing saying it is not a watchdog device", err)
	}
}

func TestDeviceName(t *testing.T) {
	for path, want := range map[string]string{"/dev/watchdog": "watchdog0", "/dev/watchdog1": "watchdog1"} {
		if got := deviceName(path); got != want {
			t.Errorf("deviceName(%s) = %s, want %s", path, got, want)
		}
	}
}

func TestBootClockMovesForward(t *testing.T) {
	a := BootClock()
	b := BootClock()
	if a <= 0 || b < a {
		t.Fatalf("BootClock: %s then %s", a, b)
	}
}
