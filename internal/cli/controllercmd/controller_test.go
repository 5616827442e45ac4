package controllercmd

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
