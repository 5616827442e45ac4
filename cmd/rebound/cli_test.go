package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagUsagesHaveNoBackquotes: pflag takes a backquoted word in a
// flag's usage as the name of its value (`--peering rebound agent`), so a
// boolean looks as if it took an argument. No flag of any command may
// have one.
func TestFlagUsagesHaveNoBackquotes(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					t.Errorf("%s --%s: usage has a backquote, which becomes its value placeholder: %q", c.CommandPath(), f.Name, f.Usage)
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

var (
	builtOnce sync.Once
	built     string
	buildErr  error
)

// binary builds cmd/rebound once, for tests that run it as a user does.
func binary(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rebound-cli-test-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "rebound")
		out, err := exec.Command("go", "build", "-o", built, ".").CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf("%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build rebound: %v", buildErr)
	}
	return built
}

// TestHelpAsAUserSeesIt runs the built binary's --help: boolean flags show
// no value, and value flags show their type.
func TestHelpAsAUserSeesIt(t *testing.T) {
	bin := binary(t)
	for _, tc := range []struct {
		args []string
		want []string
		bad  []string
	}{
		{[]string{"controller", "--help"}, []string{"      --peering  "}, []string{"--peering rebound", "--peering string"}},
		{[]string{"restore", "etcd", "--help"}, []string{"--snapshot string"}, []string{"--snapshot rebound"}},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rebound %v: %v\n%s", tc.args, err, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("rebound %v lacks %q:\n%s", tc.args, w, out)
			}
		}
		for _, b := range tc.bad {
			if strings.Contains(string(out), b) {
				t.Errorf("rebound %v shows %q:\n%s", tc.args, b, out)
			}
		}
	}
}
