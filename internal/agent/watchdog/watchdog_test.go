package watchdog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The rows are the kernel's documented behaviours of its drivers
// (Documentation/watchdog/watchdog-api.rst, drivers/watchdog/softdog.c).
func TestVerify(t *testing.T) {
	good := Info{Identity: "iTCO_wdt", MagicClose: true, SetTimeout: true, Timeout: 10 * time.Second}
	for _, tc := range []struct {
		name string
		edit func(*Info)
		want string
	}{
		{"a hardware watchdog with the magic close", func(*Info) {}, ""},
		{"softdog resetting, nowayout", func(i *Info) { i.Identity, i.Nowayout = "Software Watchdog", true }, ""},
		{"no magic close: a crash stops it", func(i *Info) { i.MagicClose = false }, "WDIOF_MAGICCLOSE"},
		{"a fixed timeout", func(i *Info) { i.SetTimeout = false }, "WDIOF_SETTIMEOUT"},
		{"the driver rounded the timeout", func(i *Info) { i.Timeout = 8 * time.Second }, "set its timeout to 8s when asked for 10s"},
		{"softdog that only logs", func(i *Info) { i.Identity, i.NoReboot = "Software Watchdog", true }, "soft_noboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := good
			tc.edit(&info)
			err := Verify("/dev/watchdog0", info, 10*time.Second)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrNotFencing) {
				t.Fatalf("error %v, want ErrNotFencing naming %q", err, tc.want)
			}
		})
	}
}
