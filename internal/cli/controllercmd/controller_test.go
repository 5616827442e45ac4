package controllercmd

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// TestLeaderElectionIsOnByDefault: a second `rebound controller` beside
// the Deployment must wait for the Lease, not act (and publish a peer set)
// too; turning it off is spelled out and documented as for tests.
func TestLeaderElectionIsOnByDefault(t *testing.T) {
	f := NewCommand().Flags().Lookup("leader-elect")
	if f == nil || f.DefValue != "true" {
		t.Fatalf("--leader-elect default = %v, want true", f)
	}
	if !strings.Contains(f.Usage, "--leader-elect=false is for tests only") {
		t.Errorf("--leader-elect usage does not say that turning it off is for tests: %q", f.Usage)
	}
}

func TestLeaseHolder(t *testing.T) {
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "rebound-system", Name: leaderElectionID},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(holder),
				LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime:            &metav1.MicroTime{Time: now.Add(-renewedAgo)},
			},
		}
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  string // "" means no message
	}{
		{"held by another replica", lease("rebound-controller-7d9f_abc", 3*time.Second), "held by rebound-controller-7d9f_abc (renewed 3s ago, lease 15s)"},
		{"expired: the holder is gone, this one takes it", lease("laptop_123", time.Minute), ""},
		{"released on a clean stop", lease("", time.Second), ""},
		{"no Lease yet", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			if tc.lease != nil {
				client = fake.NewSimpleClientset(tc.lease)
			}
			got := leaseHolder(context.Background(), client, "rebound-system", now)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("leaseHolder = %q, want %q", got, tc.want)
			}
			if got != "" && !strings.Contains(got, "waiting for the leader-election Lease") {
				t.Errorf("message %q does not say the controller waits", got)
			}
		})
	}
}

// TestControllerRefusesBadDetectionSettings: the watchers' count and the
// Lease margin are the controller's flags, checked at start before it
// connects anywhere, each named; a margin without the Lease plane that
// uses it is refused too, rather than silently ignored.
func TestControllerRefusesBadDetectionSettings(t *testing.T) {
	absent := "--kubeconfig=" + t.TempDir() + "/absent"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "valid: goes on to read its kubeconfig", args: []string{"--lease-plane", "--gossip-watchers=5", "--lease-margin=1s"}, want: "absent"},
		{name: "a lone watcher", args: []string{"--gossip-watchers=1"}, want: "--gossip-watchers 1"},
		{name: "more watchers than an agent's report holds", args: []string{"--gossip-watchers=8"}, want: "--gossip-watchers 8"},
		{name: "margin past the Lease", args: []string{"--lease-plane", "--lease-margin=45s"}, want: "--lease-margin 45s"},
		{name: "margin without the Lease plane", args: []string{"--lease-margin=1s"}, want: "--lease-margin needs --lease-plane"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := NewCommand()
			var out strings.Builder
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{absent}, tc.args...))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if tc.want != "absent" && strings.Contains(err.Error(), "absent") {
				t.Errorf("error %v: the controller went on to connect", err)
			}
		})
	}
}

// TestControllerCalicoAPIGroupFlag: --calico-api-group takes the values of
// calico-node's CALICO_API_GROUP and auto, any case; anything else, or the
// flag without the Calico backend, is refused before connecting, naming
// the flag and the accepted values.
func TestControllerCalicoAPIGroupFlag(t *testing.T) {
	absent := "--kubeconfig=" + t.TempDir() + "/absent"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "auto: goes on to read its kubeconfig", args: []string{"--peering", "--calico", "--calico-api-group=auto"}, want: "absent"},
		{name: "v1", args: []string{"--peering", "--calico", "--calico-api-group=crd.projectcalico.org/v1"}, want: "absent"},
		{name: "v3, confd's case-insensitive spelling", args: []string{"--peering", "--calico", "--calico-api-group=ProjectCalico.org/v3"}, want: "absent"},
		{name: "a group without a version", args: []string{"--peering", "--calico", "--calico-api-group=projectcalico.org"}, want: `--calico-api-group "projectcalico.org": want one of auto, crd.projectcalico.org/v1, projectcalico.org/v3`},
		{name: "a typo", args: []string{"--peering", "--calico", "--calico-api-group=crd.projectcalico.org/v3"}, want: `--calico-api-group "crd.projectcalico.org/v3": want one of`},
		{name: "without --calico", args: []string{"--peering", "--calico-api-group=projectcalico.org/v3"}, want: "--calico-api-group needs --calico"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := NewCommand()
			var out strings.Builder
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{absent}, tc.args...))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if tc.want != "absent" && strings.Contains(err.Error(), "absent") {
				t.Errorf("error %v: the controller went on to connect", err)
			}
		})
	}
}

func TestControllerCalicoAPIGroupHelp(t *testing.T) {
	f := NewCommand().Flags().Lookup("calico-api-group")
	if f == nil || f.DefValue != "auto" {
		t.Fatalf("--calico-api-group: %+v, want default auto", f)
	}
	for _, want := range []string{"CALICO_API_GROUP", "crd.projectcalico.org/v1 whenever that group is served", "projectcalico.org/v3"} {
		if !strings.Contains(f.Usage, want) {
			t.Errorf("--calico-api-group help %q lacks %q", f.Usage, want)
		}
	}
}

// apiServerServing is an API server's discovery that serves the named
// groups.
func apiServerServing(t *testing.T, groups ...string) *rest.Config {
	t.Helper()
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range groups {
		gv := metav1.GroupVersionForDiscovery{GroupVersion: g + "/v1", Version: "v1"}
		list.Groups = append(list.Groups, metav1.APIGroup{Name: g, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			_ = json.NewEncoder(w).Encode(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
		case "/apis":
			_ = json.NewEncoder(w).Encode(list)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// TestLogCalicoAPIGroup: at start the controller logs which group its
// Calico BGPPeer goes to and why, or why there is none.
func TestLogCalicoAPIGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		served  []string
		setting string
		want    []string
	}{
		{"both served, auto", []string{"apps", "crd.projectcalico.org", "projectcalico.org"}, "auto", []string{"level=INFO", "apiGroup=crd.projectcalico.org/v1", "both groups are served"}},
		{"v3 alone", []string{"projectcalico.org"}, "auto", []string{"level=INFO", "apiGroup=projectcalico.org/v3", "only projectcalico.org is served"}},
		{"v3 forced, not served", []string{"crd.projectcalico.org"}, "projectcalico.org/v3", []string{"level=ERROR", "no API group to write it to yet", "does not serve projectcalico.org"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			logCalicoAPIGroup(logr.FromSlogHandler(slog.NewTextHandler(&buf, nil)), apiServerServing(t, tc.served...), tc.setting)
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("log %q lacks %q", buf.String(), w)
				}
			}
		})
	}
}
