package bird_test

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rebound/internal/lab/birdlab"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

var capture = flag.Bool("capture", false, "rewrite testdata/birdc/ with the output of the real BIRD instances of TestLive*")

// liveNet gives each version its own loopback /24 so the two subtests
// never see each other's instances.
var liveNet = map[bird.Version]byte{bird.Bird16: 1, bird.Bird2: 2}

// TestLiveGracefulRestartWaitsForDeadPeerUntilPruned reproduces seed 003
// with real daemons, then shows the fix. Three nodes A, B, C on loopback;
// C is dead (never started). A restarts in graceful-restart recovery
// (`bird -R`, as calico-node does):
//
//  1. with the full mesh, A keeps waiting for C after B is Established:
//     `show status` says "Waiting for 1 protocols to recover";
//  2. with rebound's pruned peer set (C left out), recovery ends as soon as
//     B has converged, long before the 240 s wait.
//
// It also captures the birdc outputs the parser tests read (-capture).
func TestLiveGracefulRestartWaitsForDeadPeerUntilPruned(t *testing.T) {
	for _, v := range []bird.Version{bird.Bird16, bird.Bird2} {
		t.Run(string(v), func(t *testing.T) {
			bins := birdtest.Require(t, v)
			runGracefulRestartScenario(t, bins)
		})
	}
}

// liveNode is one loopback BIRD node of the scenario.
type liveNode struct {
	name string
	addr netip.Addr
	port uint16
}

func runGracefulRestartScenario(t *testing.T, bins birdtest.Binaries) {
	v := bins.Version
	nodes := make([]liveNode, 3)
	for i := range nodes {
		a := netip.AddrFrom4([4]byte{127, 0, liveNet[v], byte(i + 2)})
		nodes[i] = liveNode{name: fmt.Sprintf("node-%d", i+2), addr: a, port: birdtest.FreePort(t, a)}
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	dir := t.TempDir()
	write := func(self liveNode, peers ...liveNode) string {
		t.Helper()
		cfg := birdlab.StandaloneConfig{
			Mesh: bird.MeshConfig{
				Version: v, NodeName: self.name, Address: self.addr, AS: 64512, ListenPort: self.port,
				GracefulRestartWait: bird.DefaultGracefulRestartWait,
			},
			Routes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 65, self.addr.As4()[3], 0}), 26)},
		}
		var names []string
		for _, p := range peers {
			cfg.Mesh.Peers = append(cfg.Mesh.Peers, bird.Peer{Name: p.name, Address: p.addr, Port: p.port})
			names = append(names, p.name)
		}
		out, err := birdlab.RenderStandalone(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("%s_%s.conf", self.name, strings.Join(names, "_")))
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := bins.Parse(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	toB := "Mesh_" + strings.ReplaceAll(b.addr.String(), ".", "_")
	toA := "Mesh_" + strings.ReplaceAll(a.addr.String(), ".", "_")

	fullA, fullB := write(a, b, c), write(b, a, c)
	daemonA := birdtest.Start(t, bins, fullA, birdtest.Options{})
	daemonB := birdtest.Start(t, bins, fullB, birdtest.Options{})
	waitEstablished(t, daemonA, toB)
	saveCapture(t, v, "show_protocols_established", birdc(t, daemonA, "show", "protocols"))
	saveCapture(t, v, "show_status_running", birdc(t, daemonA, "show", "status"))

	// 1. The seed's failure: A restarts in recovery with the dead C still
	// configured. B comes back, C never does, and A keeps waiting.
	if err := daemonA.Stop(); err != nil {
		t.Fatal(err)
	}
	waitNotEstablished(t, daemonB, toA)
	saveCapture(t, v, "show_protocols_peer_down", birdc(t, daemonB, "show", "protocols"))

	daemonA = birdtest.Start(t, bins, fullA, birdtest.Options{Recovery: true})
	waitEstablished(t, daemonA, toB)
	// Once B has sent its End-of-RIB only C is missing, and stays missing.
	var gr *bird.GracefulRestartStatus
	birdtest.WaitUntil(t, time.Minute, "recovery waits for the dead peer only", func() (bool, string) {
		st, err := daemonA.Status()
		if err != nil {
			return false, err.Error()
		}
		gr = st.GracefulRestart
		return gr != nil && gr.Waiting == 1, fmt.Sprintf("%+v", gr)
	})
	if gr.Wait != bird.DefaultGracefulRestartWait*time.Second || gr.Remaining <= 0 || gr.Remaining > gr.Wait {
		t.Errorf("wait timer %v/%v, want a running 240 s timer", gr.Remaining, gr.Wait)
	}
	if gr.WaitingUnit != waitUnit(v) {
		t.Errorf("BIRD %s counts %q, want %q", v, gr.WaitingUnit, waitUnit(v))
	}
	t.Logf("BIRD %s with the dead peer configured: B Established, still %d %s to recover, wait timer %v/%v",
		v, gr.Waiting, gr.WaitingUnit, gr.Remaining, gr.Wait)
	saveCapture(t, v, "show_protocols_recovery", birdc(t, daemonA, "show", "protocols"))
	saveCapture(t, v, "show_status_recovery", birdc(t, daemonA, "show", "status"))
	saveCapture(t, v, "show_status_recovery_birdc_v", birdc(t, daemonA, "-v", "show", "status"))
	raw, err := daemonA.Query("show protocols")
	if err != nil {
		t.Fatal(err)
	}
	saveCapture(t, v, "show_protocols_recovery_socket", raw)

	// 2. The fix: the same restart with C pruned from A's peer set.
	if err := daemonA.Stop(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	daemonA = birdtest.Start(t, bins, write(a, b), birdtest.Options{Recovery: true})
	// The deadline is half the wait: recovery that ends before it was not
	// ended by the wait timer. It is a hang guard, not a speed assertion.
	birdtest.WaitUntil(t, bird.DefaultGracefulRestartWait/2*time.Second, "recovery with the pruned peer set ends", func() (bool, string) {
		st, err := daemonA.Status()
		if err != nil {
			return false, err.Error()
		}
		return st.GracefulRestart == nil, fmt.Sprintf("%+v", st.GracefulRestart)
	})
	waitEstablished(t, daemonA, toB)
	t.Logf("BIRD %s with the pruned peer set: recovery over %.1f s after start (the wait is %d s)",
		v, time.Since(started).Seconds(), bird.DefaultGracefulRestartWait)
}

func waitUnit(v bird.Version) string {
	if v == bird.Bird2 {
		return "channels"
	}
	return "protocols"
}

func findProtocol(d *birdtest.Daemon, name string) (bird.Protocol, string) {
	protos, err := d.Protocols()
	if err != nil {
		return bird.Protocol{}, err.Error()
	}
	for _, p := range protos {
		if p.Name == name {
			return p, fmt.Sprintf("%+v", p)
		}
	}
	return bird.Protocol{}, fmt.Sprintf("no protocol %s in %+v", name, protos)
}

func waitEstablished(t *testing.T, d *birdtest.Daemon, name string) {
	t.Helper()
	birdtest.WaitUntil(t, time.Minute, name+" Established", func() (bool, string) {
		p, why := findProtocol(d, name)
		return p.Established(), why
	})
}

func waitNotEstablished(t *testing.T, d *birdtest.Daemon, name string) {
	t.Helper()
	birdtest.WaitUntil(t, time.Minute, name+" down", func() (bool, string) {
		p, why := findProtocol(d, name)
		return p.Name != "" && !p.Established() && p.BGPState() != "", why
	})
}

func birdc(t *testing.T, d *birdtest.Daemon, args ...string) string {
	t.Helper()
	out, err := d.Birdc(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// saveCapture writes testdata/birdc/<version>_<what>.txt under -capture.
func saveCapture(t *testing.T, v bird.Version, what, out string) {
	t.Helper()
	if !*capture {
		return
	}
	path := filepath.Join("testdata", "birdc", fmt.Sprintf("bird%s_%s.txt", strings.ReplaceAll(string(v), ".", ""), what))
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
