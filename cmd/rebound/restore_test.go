package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"rebound/internal/controller"
	"rebound/pkg/exitcode"
	"rebound/pkg/stopswitch"
)

func TestParseStopSwitch(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want types.NamespacedName
		bad  bool
	}{
		{"rebound-system/rebound-stop", types.NamespacedName{Namespace: "rebound-system", Name: "rebound-stop"}, false},
		{"ops/halt", types.NamespacedName{Namespace: "ops", Name: "halt"}, false},
		{"halt", types.NamespacedName{Namespace: "rebound-system", Name: "halt"}, false},
		{"", types.NamespacedName{}, false},
		{"/halt", types.NamespacedName{}, true},
		{"ops/", types.NamespacedName{}, true},
		{"a/b/c", types.NamespacedName{}, true},
	} {
		got, err := parseStopSwitch(tc.in)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("parseStopSwitch(%q) = %v, %v; want %v, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// TestRestoreBringupSafetyFlags: the stop switch is on by default (the
// controller's), and a bad value is bad input before any API call.
func TestRestoreBringupSafetyFlags(t *testing.T) {
	cmd := newRestoreBringupCommand()
	if f := cmd.Flags().Lookup("stop-switch"); f == nil || f.DefValue != "rebound-system/rebound-stop" {
		t.Fatalf("--stop-switch default = %v, want rebound-system/rebound-stop", f)
	}
	if f := cmd.Flags().Lookup("ignore-suspend"); f == nil || f.DefValue != "false" {
		t.Fatalf("--ignore-suspend = %v, want a flag off by default", f)
	}
	_, _, err := run(t, "restore", "bringup", "--workload", "kube-system/deployment/coredns", "--stop-switch", "a/b/c", "--kubeconfig", "/nonexistent")
	if exitcode.Of(err, exitcode.OK) != 2 || !strings.Contains(err.Error(), "--stop-switch") {
		t.Errorf("bad --stop-switch: err %v, want exit 2 naming the flag", err)
	}
}

// TestStopSwitchNameIsTheControllers: bringup's default switch is the one
// the controller reads (and deploy/rbac grants get on).
func TestStopSwitchNameIsTheControllers(t *testing.T) {
	if controller.DefaultStopSwitch != stopswitch.DefaultName {
		t.Errorf("controller.DefaultStopSwitch %q != stopswitch.DefaultName %q", controller.DefaultStopSwitch, stopswitch.DefaultName)
	}
}
