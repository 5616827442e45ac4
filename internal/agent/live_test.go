package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"rebound/internal/lab/birdlab"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

// TestLiveSyncerKeepsLastGoodConfig runs the Syncer against real BIRD 1.6
// and 2: a set change reloads; a configuration BIRD rejects (a filter its
// main configuration does not define) is rolled back to the last good file
// while BIRD keeps running; an unreachable BIRD gives an error naming the
// socket and leaves the last good file in place.
func TestLiveSyncerKeepsLastGoodConfig(t *testing.T) {
	for i, v := range []bird.Version{bird.Bird16, bird.Bird2} {
		t.Run(string(v), func(t *testing.T) {
			bins := birdtest.Require(t, v)
			dir, err := os.MkdirTemp("", "agentlive")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			lab, err := birdlab.New(birdlab.Options{Bins: bins, Nodes: 3, Net: 50 + i, Dir: dir, Include: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := lab.Close(); err != nil {
					t.Error(err)
				}
			})
			ctx := context.Background()
			a := lab.Nodes[0]
			if err := lab.Start(ctx, a, false); err != nil {
				t.Fatal(err)
			}
			base := lab.MeshConfig(a, nil)
			s, err := NewSyncer(a.MeshPath, a.Client(), base)
			if err != nil {
				t.Fatal(err)
			}
			// Drop node-2 from the set: BIRD loads the new file.
			if got, err := s.Sync(ctx, []bird.Peer{lab.Nodes[1].Peer()}); got != Reloaded || err != nil {
				t.Fatalf("sync = %s, %v; want Reloaded", got, err)
			}
			if n := bgpProtocols(t, a); n != 1 {
				t.Fatalf("BIRD has %d BGP protocols after the reload, want 1", n)
			}
			good, _ := os.ReadFile(a.MeshPath)

			// A configuration BIRD refuses: rolled back, BIRD unchanged.
			badBase := base
			badBase.ImportFilter = "rebound_no_such_filter"
			bad, err := NewSyncer(a.MeshPath, a.Client(), badBase)
			if err != nil {
				t.Fatal(err)
			}
			got, err := bad.Sync(ctx, lab.Peers(a))
			var ce *bird.ConfigError
			if got != Rejected || !errors.As(err, &ce) {
				t.Fatalf("sync = %s, %v; want Rejected with BIRD's complaint", got, err)
			}
			t.Logf("BIRD %s said: %v", v, err)
			if now, _ := os.ReadFile(a.MeshPath); string(now) != string(good) {
				t.Errorf("the rejected file stayed in place:\n%s", now)
			}
			if n := bgpProtocols(t, a); n != 1 {
				t.Errorf("BIRD has %d BGP protocols after the rejected reload, want still 1", n)
			}

			// BIRD gone: a clear error naming the socket, last good kept.
			if err := lab.Kill(a); err != nil {
				t.Fatal(err)
			}
			got, err = s.Sync(ctx, lab.Peers(a))
			var ue *bird.UnreachableError
			if got != Unreachable || !errors.As(err, &ue) || !strings.Contains(err.Error(), a.Socket) {
				t.Fatalf("sync = %s, %v; want Unreachable naming %s", got, err, a.Socket)
			}
			if now, _ := os.ReadFile(a.MeshPath); string(now) != string(good) {
				t.Errorf("an unapplied file stayed in place while BIRD was down")
			}

			// With BIRD's parser as a check, a file BIRD accepts stays for
			// BIRD's start; one it refuses is still rolled back.
			s.SetCheck(ParseCheck(bins.Bird, a.Config))
			got, err = s.Sync(ctx, lab.Peers(a))
			if got != Staged || err == nil {
				t.Fatalf("sync with the parse check = %s, %v; want Staged", got, err)
			}
			staged, _ := os.ReadFile(a.MeshPath)
			if !strings.Contains(string(staged), bird.ProtocolName(lab.Nodes[2].Address)) {
				t.Errorf("the staged file lacks node-2:\n%s", staged)
			}
			// (A new Syncer takes the file on disk, the staged one, as last good.)
			bad, err = NewSyncer(a.MeshPath, a.Client(), badBase)
			if err != nil {
				t.Fatal(err)
			}
			bad.SetCheck(ParseCheck(bins.Bird, a.Config))
			if got, err := bad.Sync(ctx, []bird.Peer{lab.Nodes[1].Peer()}); got != Unreachable || !strings.Contains(fmt.Sprint(err), "parser rejects") {
				t.Errorf("sync of a bad file with the parse check = %s, %v; want Unreachable, rolled back", got, err)
			}
			if now, _ := os.ReadFile(a.MeshPath); string(now) != string(staged) {
				t.Errorf("a file BIRD's parser refuses stayed in place")
			}
			// BIRD starts with the staged set.
			if err := lab.Start(ctx, a, false); err != nil {
				t.Fatal(err)
			}
			if n := bgpProtocols(t, a); n != 2 {
				t.Errorf("BIRD started with %d BGP protocols, want the staged 2", n)
			}
		})
	}
}

func bgpProtocols(t *testing.T, n *birdlab.Node) int {
	t.Helper()
	protos, err := n.Client().Protocols(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, p := range protos {
		if p.Proto == "BGP" {
			count++
		}
	}
	return count
}
