package peering

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func validSet() PeerSet {
	return PeerSet{Version: PeerSetVersion, Generation: 3, PublishedAt: t0, Floor: 1, Peers: []PublishedPeer{
		{Name: "node-1", Address: netip.MustParseAddr("10.0.0.1"), Port: 1790, Ready: true, ReadySince: t0.Add(-time.Hour), Reason: InReady},
		{Name: "node-2", Address: netip.MustParseAddr("10.0.0.2"), Reason: InSessionUp, ReadySince: t0.Add(-time.Minute), Alive: "node-1 reports ..."},
	}}
}

func TestPeerSetRoundTrip(t *testing.T) {
	s := validSet()
	got, err := ParsePeerSet(s.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameContent(s) || got.Generation != s.Generation || !got.PublishedAt.Equal(s.PublishedAt) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
	other := validSet()
	other.Peers[1].Alive = ""
	if other.SameContent(s) {
		t.Error("SameContent ignores the alive evidence")
	}
	other = validSet()
	other.Generation, other.PublishedAt = 9, t0.Add(time.Hour)
	if !other.SameContent(s) {
		t.Error("SameContent must ignore generation and time")
	}
}

func TestParsePeerSetIsStrict(t *testing.T) {
	enc := validSet().Encode()
	for name, tc := range map[string]struct {
		data, want string
	}{
		"unknown field":    {strings.Replace(enc, `"floor"`, `"flour":1,"floor"`, 1), "unknown field"},
		"trailing data":    {enc + "{}", "after the JSON document"},
		"wrong version":    {strings.Replace(enc, `"version":1`, `"version":2`, 1), "version 2"},
		"no generation":    {strings.Replace(enc, `"generation":3`, `"generation":0`, 1), "generation 0"},
		"floor too high":   {strings.Replace(enc, `"floor":1`, `"floor":3`, 1), "floor 3"},
		"bad name":         {strings.Replace(enc, `"node-2"`, `"Node_2"`, 1), "peers[1].name"},
		"unsorted":         {strings.Replace(enc, `"node-2"`, `"node-0"`, 1), "sorted and unique"},
		"IPv6":             {strings.Replace(enc, `"10.0.0.2"`, `"fd00::2"`, 1), "peers[1].address"},
		"an out reason":    {strings.Replace(enc, `"SessionEstablished"`, `"NotReadyPastGrace"`, 1), "peers[1].reason"},
		"frozen, no why":   {strings.Replace(enc, `"floor":1`, `"floor":1,"frozen":true`, 1), "frozenReason"},
		"not JSON":         {"peers: []", "peer set"},
		"negative port":    {strings.Replace(enc, `"port":1790`, `"port":-1`, 1), "peer set"},
		"missing time":     {strings.Replace(enc, `"publishedAt":"2026-03-01T12:00:00Z",`, ``, 1), "publishedAt"},
		"duplicate member": {strings.Replace(enc, `"node-2"`, `"node-1"`, 1), "sorted and unique"},
	} {
		if _, err := ParsePeerSet(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
}

// FuzzParsePeerSet: whatever sits in the ConfigMap, the agent's parser
// never panics, and what it accepts encodes back to a document it accepts
// with the same content.
func FuzzParsePeerSet(f *testing.F) {
	f.Add(validSet().Encode())
	f.Add(`{"version":1,"generation":1,"publishedAt":"2026-01-01T00:00:00Z","floor":0,"peers":[]}`)
	f.Fuzz(func(t *testing.T, data string) {
		s, err := ParsePeerSet(data)
		if err != nil {
			return
		}
		again, err := ParsePeerSet(s.Encode())
		if err != nil {
			t.Fatalf("an accepted document does not re-parse: %v\n%s", err, s.Encode())
		}
		if !again.SameContent(s) {
			t.Fatalf("round trip changed the document")
		}
	})
}
