package e2e

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/sandbox"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// agentOutage is how long the apiserver stays away.
const agentOutage = 2 * time.Minute

// TestFaultAgentAPIOutage stops kube-apiserver for two minutes under three
// BGP nodes whose agents and peering controller run on the sandbox. An
// agent that cannot reach the API knows nothing new, so it must change
// nothing: every BIRD keeps its configuration and its sessions (same state,
// same "since"), every agent stays ready, none reloads BIRD, during the
// outage and after the apiserver returns.
func TestFaultAgentAPIOutage(t *testing.T) {
	bins := birdtest.Require(t, bird.Bird16)
	c := startSandbox(t, 3, faultTimings())
	ctx := testContext(t, 8*time.Minute)
	const label = "fault.rebound.dev/bgp=yes"
	lab := birdLabOnSandbox(ctx, t, c, birdlab.Options{
		Bins: bins, Nodes: 3, Net: 21, Dir: shortDir(t), Include: true,
		GracefulRestartTime: 10, GracefulRestartWait: bird.DefaultGracefulRestartWait,
	}, label)
	set := startPeeringController(t, c, controller.PeeringOptions{
		Name:         "peering-fault",
		Config:       peering.Config{PruneGracePeriod: 20 * time.Second},
		NodeSelector: labels.SelectorFromSet(labels.Set{"fault.rebound.dev/bgp": "yes"}),
		State:        controllerState("rebound-peering-fault"),
	})
	for _, n := range lab.Nodes {
		waitInSet(ctx, t, c, n.Name, true, 30*time.Second)
	}
	must(t, lab.StartAll(ctx))
	agents := map[string]*runningAgent{}
	for _, n := range lab.Nodes {
		agents[n.Name] = startAgent(t, c, lab, n, agent.Options{
			Debounce: 200 * time.Millisecond, StatusInterval: time.Second, ReportInterval: 2 * time.Second,
			ReadyAfter: time.Hour, BirdBinary: bins.Bird, BirdConfig: n.Config, PeerSet: set,
		})
	}
	s4Converge(ctx, t, lab, false)
	for name, a := range agents {
		poll(ctx, t, 30*time.Second, name+" ready with every peer Established", func() (bool, string) {
			code, body := a.readyz()
			return code == http.StatusOK, body
		})
	}
	before := observeMesh(ctx, t, lab, agents)

	t.Logf("stopping kube-apiserver for %s", agentOutage)
	if err := c.StopComponent(sandbox.APIServer, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	outageEnd := time.Now().Add(agentOutage)
	checks := 0
	for time.Now().Before(outageEnd) {
		compareMesh(t, before, observeMesh(ctx, t, lab, agents), "during the outage")
		checks++
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Second):
		}
	}
	if err := c.StartComponent(ctx, sandbox.APIServer); err != nil {
		t.Fatal(err)
	}
	// After the return: the agents reconnect and find the same set.
	settle := time.Now().Add(30 * time.Second)
	for time.Now().Before(settle) {
		compareMesh(t, before, observeMesh(ctx, t, lab, agents), "after the apiserver returned")
		time.Sleep(5 * time.Second)
	}
	metric(t, "fault_agent_outage_checks", float64(checks), "count")
}

// meshState is what an API outage must not change, per node.
type meshState struct {
	include  string             // the agent's BIRD include
	sessions map[string]session // by protocol
	ready    int                // /readyz status code
	reloads  int
}

func observeMesh(ctx context.Context, t *testing.T, lab *birdlab.Lab, agents map[string]*runningAgent) map[string]meshState {
	t.Helper()
	out := map[string]meshState{}
	for _, n := range lab.Nodes {
		data, err := os.ReadFile(n.MeshPath)
		if err != nil {
			t.Fatal(err)
		}
		st := meshState{include: string(data), sessions: map[string]session{}}
		protos, err := n.Client().Protocols(ctx)
		if err != nil {
			t.Fatalf("%s: birdc: %v", n.Name, err)
		}
		for _, p := range protos {
			if p.Proto == "BGP" {
				st.sessions[p.Name] = session{state: p.State + " " + p.BGPState(), since: p.Since}
			}
		}
		st.ready, _ = agents[n.Name].readyz()
		st.reloads = agents[n.Name].Stats().Reloads
		out[n.Name] = st
	}
	return out
}

// session is a BGP session as birdc shows it.
type session struct {
	state string // protocol state and BGP state, e.g. "up Established"
	since string // when the state was entered, e.g. "18:57:34"
}

// restartedSince tells whether the session entered its state again after
// before did. BIRD 1.6 prints "since" to the second from a monotonic
// clock, so the same moment can read a second apart between two queries.
func (s session) restartedSince(before session) bool {
	now, err1 := time.Parse(time.TimeOnly, s.since)
	then, err2 := time.Parse(time.TimeOnly, before.since)
	if err1 != nil || err2 != nil {
		return s.since != before.since
	}
	return now.Sub(then) > time.Second
}

func compareMesh(t *testing.T, want, got map[string]meshState, when string) {
	t.Helper()
	for name, w := range want {
		g := got[name]
		if g.include != w.include {
			t.Errorf("%s %s: BIRD include changed:\n%s\nwas:\n%s", name, when, g.include, w.include)
		}
		for proto, s := range w.sessions {
			if gs := g.sessions[proto]; gs.state != s.state || gs.restartedSince(s) {
				t.Errorf("%s %s: session %s is %+v, was %+v", name, when, proto, gs, s)
			}
		}
		if g.ready != w.ready {
			t.Errorf("%s %s: /readyz %d, was %d", name, when, g.ready, w.ready)
		}
		if g.reloads != w.reloads {
			t.Errorf("%s %s: BIRD reloaded %d times, was %d", name, when, g.reloads, w.reloads)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
