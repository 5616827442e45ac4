package metricsserving

import (
	"testing"

	"github.com/spf13/pflag"
)

// The flags' defaults serve HTTPS behind the filter; only --metrics-insecure
// drops both, and 0 disables the server.
func TestOptionsFromFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		enabled    bool
		secure     bool
		wantAddr   string
		wantFilter bool
	}{
		{nil, true, true, ":9811", true},
		{[]string{"--metrics-bind-address=127.0.0.1:1"}, true, true, "127.0.0.1:1", true},
		{[]string{"--metrics-insecure"}, true, false, ":9811", false},
		{[]string{"--metrics-bind-address=0"}, false, true, "0", true},
	} {
		var c Config
		f := pflag.NewFlagSet("t", pflag.ContinueOnError)
		AddFlags(f, &c, ":9811")
		if err := f.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		o := c.Options()
		if c.Enabled() != tc.enabled || o.SecureServing != tc.secure || o.BindAddress != tc.wantAddr || (o.FilterProvider != nil) != tc.wantFilter {
			t.Errorf("%v: enabled %v, secure %v, addr %q, filter %v; want %v, %v, %q, %v",
				tc.args, c.Enabled(), o.SecureServing, o.BindAddress, o.FilterProvider != nil, tc.enabled, tc.secure, tc.wantAddr, tc.wantFilter)
		}
	}
}
