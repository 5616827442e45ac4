package kube

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
)

var reportT0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestReportRoundTrip(t *testing.T) {
	r := peering.Report{
		Reporter: "node-1", ObservedAt: reportT0, SetGeneration: 7, Established: 3,
		Sessions: []peering.Session{
			{Peer: "node-2", State: "Established", Since: reportT0.Add(-10 * time.Second), BFD: "Up"},
			{Peer: "node-3", State: "Active"},
		},
	}
	obj := ReportToAPI(r)
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var back v1alpha1.PeeringReport
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	got, err := ReportFromAPI(&back)
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameContent(r) || !got.ObservedAt.Equal(r.ObservedAt) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
	}
}

// TestGossipRoundTrip: what an agent's gossip writer applies reads back
// the same, its number of watchers included (the controller checks it
// against its own).
func TestGossipRoundTrip(t *testing.T) {
	g := liveness.GossipReport{ObservedAt: reportT0, Members: 9, Watchers: 5, Watches: []liveness.Watch{
		{Node: "node-2", State: liveness.GossipAlive, Since: reportT0.Add(-time.Hour)},
		{Node: "node-3", State: liveness.GossipDead, Since: reportT0.Add(-time.Second)},
	}}
	data, err := json.Marshal(GossipToAPI("node-1", g))
	if err != nil {
		t.Fatal(err)
	}
	var back v1alpha1.PeeringReport
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	got, err := ReportFromAPI(&back)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Gossip.SameContent(&g) || !got.Gossip.ObservedAt.Equal(g.ObservedAt) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got.Gossip, g)
	}
}

func TestReportFromAPIRejects(t *testing.T) {
	ok := func() *v1alpha1.PeeringReport {
		return &v1alpha1.PeeringReport{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Report: v1alpha1.PeeringReportData{ObservedAt: metav1.NewTime(reportT0)}}
	}
	for name, tc := range map[string]struct {
		mut  func(*v1alpha1.PeeringReport)
		want string
	}{
		"no time": {func(o *v1alpha1.PeeringReport) { o.Report.ObservedAt = metav1.Time{} }, "report.observedAt"},
		"no name": {func(o *v1alpha1.PeeringReport) { o.Name = "" }, "metadata.name"},
		"peer twice": {func(o *v1alpha1.PeeringReport) {
			o.Report.Peers = []v1alpha1.PeerSession{{Node: "a", State: "Active"}, {Node: "a", State: "Idle"}}
		}, "listed twice"},
		"empty state":  {func(o *v1alpha1.PeeringReport) { o.Report.Peers = []v1alpha1.PeerSession{{Node: "a"}} }, "report.peers[0].state"},
		"negative cnt": {func(o *v1alpha1.PeeringReport) { o.Report.Established = -1 }, "must not be negative"},
	} {
		o := ok()
		tc.mut(o)
		if _, err := ReportFromAPI(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to name %q", name, err, tc.want)
		}
	}
}

// FuzzReportFromAPI: any JSON an agent (or an attacker with an agent's
// credential) can store is read without a panic, and what is accepted
// survives a round trip.
func FuzzReportFromAPI(f *testing.F) {
	f.Add(`{"metadata":{"name":"n1"},"report":{"observedAt":"2026-01-01T12:00:00Z","established":2,"peers":[{"node":"n2","state":"Established","since":"2026-01-01T11:59:00Z","bfd":"Up"}]}}`)
	f.Add(`{"metadata":{"name":"n1"},"report":{"observedAt":"2026-01-01T12:00:00Z","birdError":"BIRD control socket does not answer"}}`)
	f.Fuzz(func(t *testing.T, data string) {
		var obj v1alpha1.PeeringReport
		if json.Unmarshal([]byte(data), &obj) != nil {
			return
		}
		r, err := ReportFromAPI(&obj)
		if err != nil {
			return
		}
		again, err := ReportFromAPI(ReportToAPI(r))
		if err != nil {
			t.Fatalf("accepted report does not survive a round trip: %v", err)
		}
		if len(again.Sessions) != len(r.Sessions) || again.Reporter != r.Reporter {
			t.Fatalf("round trip changed the report: %+v -> %+v", r, again)
		}
	})
}

func TestPeerSetFromConfigMap(t *testing.T) {
	s := peering.PeerSet{Version: peering.PeerSetVersion, Generation: 1, PublishedAt: reportT0, Peers: []peering.PublishedPeer{}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rebound-system", Name: "rebound-peer-set"}, Data: map[string]string{peering.PeerSetKey: s.Encode()}}
	got, err := PeerSetFromConfigMap(cm)
	if err != nil || !reflect.DeepEqual(got.Generation, int64(1)) {
		t.Fatalf("got %+v, %v", got, err)
	}
	delete(cm.Data, peering.PeerSetKey)
	if _, err := PeerSetFromConfigMap(cm); err == nil || !strings.Contains(err.Error(), peering.PeerSetKey) {
		t.Errorf("missing key: %v", err)
	}
}
