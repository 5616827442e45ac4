package peering

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/bird"
)

func TestStartKeeps(t *testing.T) {
	tests := []struct {
		name string
		p    StartPeer
		want bool
	}{
		{"Ready, nothing else known", StartPeer{Ready: true}, true},
		{"Ready, every working member lost it (died before the API noticed)", StartPeer{Ready: true, Unreachable: true}, false},
		{"Ready and lost, but this BIRD has it Established", StartPeer{Ready: true, Unreachable: true, LocalEstablished: true}, true},
		{"NotReady in grace, no evidence (dead)", StartPeer{}, false},
		{"NotReady with fresh alive evidence (control plane cut, still forwarding)", StartPeer{Alive: true}, true},
		{"NotReady, alive, and reported unreachable by others", StartPeer{Alive: true, Unreachable: true}, true},
		{"NotReady, this BIRD has it Established", StartPeer{LocalEstablished: true}, true},
		{"NotReady in a frozen set, no evidence either way (full disruption)", StartPeer{Frozen: true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := StartKeeps(tc.p); got != tc.want {
				t.Errorf("StartKeeps(%+v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

// TestStartPeersSeed003 is the cluster: 10 nodes, 5 die, node-1
// returns 10 s later, before the API marks the others NotReady. The live
// members' BFD already lost them: only the live nodes are rendered.
func TestStartPeersSeed003(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var peers []StartPeer
	var nodes []liveness.Node
	var reports []liveness.Report
	dead := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	for i := range 10 {
		name := startNodeName(i)
		nodes = append(nodes, liveness.Node{Name: name, Ready: true}) // the API has not noticed yet
		if i != 1 && !dead[i] {
			r := liveness.Report{Reporter: name, ObservedAt: now.Add(-time.Second)}
			for j := range 10 {
				if j == i {
					continue
				}
				state := StateEstablished
				if dead[j] {
					state = "Active"
				}
				r.Sessions = append(r.Sessions, liveness.Session{Peer: startNodeName(j), State: state})
			}
			reports = append(reports, r)
		}
	}
	// The controller publishes liveness's Lost as PublishedPeer.Lost.
	lost := liveness.Assess(liveness.Input{Nodes: nodes, Reports: reports}, now).Lost
	for i := range 10 {
		if i == 1 {
			continue
		}
		name := startNodeName(i)
		peers = append(peers, StartPeer{
			Peer:        bird.Peer{Name: name, Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})},
			Ready:       true,
			Unreachable: lost[name] != "",
		})
	}
	got := peerNames(StartPeers(peers))
	want := []string{"node-0", "node-6", "node-7", "node-8", "node-9"}
	if !equalStrings(got, want) {
		t.Errorf("start set %v, want the live nodes %v", got, want)
	}
}

func startNodeName(i int) string { return "node-" + string(rune('0'+i)) }

func equalStrings(a, b []string) bool { return slices.Equal(a, b) }

// TestStartViewFrozenMembers: every member of a frozen set is rendered at
// BIRD's start; in a set that follows node health, a member in its grace
// without evidence of life is not.
func TestStartViewFrozenMembers(t *testing.T) {
	doc := &PeerSet{Frozen: true, FrozenReason: "full disruption", Peers: []PublishedPeer{
		{Name: "a", Reason: InFrozen},
		{Name: "b", Reason: InGracePeriod},
	}}
	peers := []bird.Peer{{Name: "a", Address: netip.MustParseAddr("10.0.0.1")}, {Name: "b", Address: netip.MustParseAddr("10.0.0.2")}}
	if got := peerNames(StartPeers(StartView(doc, peers, nil))); !equalStrings(got, []string{"a", "b"}) {
		t.Errorf("frozen: start set %v, want a and b", got)
	}
	doc.Frozen, doc.FrozenReason = false, ""
	if got := peerNames(StartPeers(StartView(doc, peers, nil))); len(got) != 0 {
		t.Errorf("not frozen: start set %v, want none (no evidence of life)", got)
	}
}

func peerNames(peers []bird.Peer) []string {
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	return names
}
