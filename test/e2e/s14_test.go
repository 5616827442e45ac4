package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/internal/agent/gossip"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// S14, forged and lost planes: the gossip plane's votes are first-hand
// about the host, so that no key holder can forge a death, a member that
// stops (a rollout, a crash) is no death while its host answers, a key
// rotation splits nothing, and a host that does die is still found as in
// S13. Every test runs the real controller (--lease-plane,
// --mark-pods-not-ready-early, a TwoPlanes policy) and a gossip agent and
// a host stand-in per node, on the S14 timings (node grace 40 s, longer
// than the 25 s stalls: any action rebound takes in a stall is early),
// and logs both planes' timelines.

// s14Forger is the node whose member forges gossip about s13Victim.
const s14Forger = "node-1"

// startS14 starts a 5-node sandbox with rebound, the agents and their
// hosts, and returns the scenario's environment; ctrlArgs are added to
// the controller's flags.
func startS14(ctx context.Context, t *testing.T, ctrlArgs ...string) scenario.S14Env {
	t.Helper()
	c := startSandbox(t, 5, scenario.S14Timings())
	agents, ctrl := startS13Rebound(ctx, t, c, scenario.GossipAgentOptions{}, ctrlArgs...)
	// Past the controller's start-up hold, so that what keeps a node from
	// early action is the rules, not the hold.
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))
	config(t, "s14_lease_stall", scenario.S14Stall.Seconds(), "s")
	config(t, "s14_node_grace", c.Timings.NodeMonitorGracePeriod.Seconds(), "s")
	return scenario.S14Env{C: c, TL: scenario.NewTimeline(laneWriter(t, scenario.LaneWith)), Agents: agents, Victim: s13Victim}
}

// s14Quiet fails the test for each early action and each Dead vote.
func s14Quiet(t *testing.T, res scenario.S14Result) {
	t.Helper()
	for _, a := range res.EarlyActions {
		t.Errorf("early action by rebound while the host lived: %s", a)
	}
	for _, v := range res.DeadVotes {
		t.Errorf("a Dead vote while every host lived: %s", v)
	}
}

// TestS14ForgedGossip: node-1's member holds the key and sends every
// member the forged sequence about the live node-3 (left at the highest
// incarnation, alive at an address where nothing answers, dead); then
// node-3's kubelet stops renewing its Lease for 25 s. No report votes
// node-3 Dead, and rebound takes no action: no taint, no pod marked not
// ready, no pod deleted.
func TestS14ForgedGossip(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	env := startS14(ctx, t)
	res, err := scenario.RunS14Forged(ctx, env, s14Forger)
	if err != nil {
		t.Fatal(err)
	}
	metricCount(t, "s14_forged_early_actions", len(res.EarlyActions))
	metricCount(t, "s14_forged_dead_votes", len(res.DeadVotes))
	s14Quiet(t, res)
}

// TestS14MemberRollout: the members restart one after another, as a
// DaemonSet rollout restarts them, and node-3's Lease stalls 25 s from
// the moment its own member stops. No Dead vote, no early action; the
// controller's rebound_gossip_disagreement gauge shows the stopped
// members and falls back to nothing.
func TestS14MemberRollout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	addr := freeAddr(t)
	env := startS14(ctx, t, "--metrics-bind-address", addr)
	token := s14Scraper(ctx, t, env.C)
	res, err := scenario.RunS14Rollout(ctx, env, scenario.S14RolloutOptions{
		Disagreement: func(ctx context.Context) (map[string][]string, error) {
			return disagreement(ctx, "https://"+addr+"/metrics", token)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	metricCount(t, "s14_rollout_early_actions", len(res.EarlyActions))
	metricCount(t, "s14_rollout_dead_votes", len(res.DeadVotes))
	metricCount(t, "s14_rollout_disagreeing_nodes", len(res.Disagreed))
	s14Quiet(t, res)
	t.Logf("disagreement seen during the rollout: %v", res.Disagreed)
	// Every member was down for 6 s with its host answering and its Lease
	// renewing: the gauge shows each (MemberDown). Not the victim's: its
	// Lease was stale while its member was down, no disagreement.
	for _, n := range env.C.NodeNames {
		if n != env.Victim && !slices.Contains(res.Disagreed[n], "MemberDown") {
			t.Errorf("the disagreement gauge never showed %s MemberDown while its member was stopped (seen: %v)", n, res.Disagreed)
		}
	}
	if len(res.DisagreementLeft) != 0 {
		t.Errorf("the disagreement gauge still shows %v a minute after the rollout, want nothing", res.DisagreementLeft)
	}
}

// TestS14KeyRotation: the gossip key is rotated through the keyring on
// the running membership (every key file "old, new", then "new, old",
// then "new"). The membership stays whole after every step and no report
// votes anyone Dead.
func TestS14KeyRotation(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	env := startS14(ctx, t)
	res, err := scenario.RunS14KeyRotation(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	config(t, "s14_key_reload_interval", scenario.GossipKeyReloadInterval.Seconds(), "s")
	metricCount(t, "s14_rotation_dead_votes", len(res.DeadVotes))
	metricCount(t, "s14_rotation_early_actions", len(res.EarlyActions))
	s14Quiet(t, res)
}

// TestS14HostAliveMemberDown: node-3's member is killed while its host
// answers: its watchers say MemberDown, none says Dead, rebound does
// nothing. Then node-3's host goes silent too (it drops packets, its
// Lease stops): the taint comes within S13's bound.
func TestS14HostAliveMemberDown(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	env := startS14(ctx, t)
	res, err := scenario.RunS14HostAliveMemberDown(ctx, env)
	metricCount(t, "s14_member_down_early_actions", len(res.EarlyActions))
	metricCount(t, "s14_member_down_dead_votes", len(res.DeadVotes))
	s14Quiet(t, res)
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "s14_host_death_to_verdict", res.Verdict.Seconds(), "s")
	if res.Verdict >= scenario.S14VerdictBound {
		t.Errorf("the taint came %v after the host died, not within S13's bound %v", res.Verdict, scenario.S14VerdictBound)
	}
}

// s14Scraper lets the controller (the sandbox user rebound) check
// scrapes of its /metrics and returns the token of a ServiceAccount
// allowed to scrape.
func s14Scraper(ctx context.Context, t *testing.T, c *sandbox.Cluster) string {
	t.Helper()
	cl := newClient(t, c)
	applyFiles(ctx, t, cl, false, repoPath("deploy/rbac/metrics_role.yaml"))
	must(t, cl.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "s14-metrics-auth"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rebound-metrics-auth"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: sandbox.ReboundUser}},
	}))
	must(t, cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "s14-scraper", Namespace: "default"}}))
	must(t, cl.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "s14-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rebound-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "s14-scraper", Namespace: "default"}},
	}))
	return serviceAccountToken(ctx, t, c, "default", "s14-scraper")
}

var disagreementSeries = regexp.MustCompile(`(?m)^rebound_gossip_disagreement\{([^}]*)\} (\S+)$`)
var seriesLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// disagreement scrapes the controller's rebound_gossip_disagreement
// series: the reasons by node whose value is 1.
func disagreement(ctx context.Context, url, token string) (map[string][]string, error) {
	code, body, err := scrapeMetrics(ctx, url, token)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %d %.200s", url, code, body)
	}
	out := map[string][]string{}
	for _, m := range disagreementSeries.FindAllStringSubmatch(body, -1) {
		if m[2] != "1" {
			continue
		}
		labels := map[string]string{}
		for _, l := range seriesLabel.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		out[labels["node"]] = append(out[labels["node"]], labels["reason"])
	}
	for n := range out {
		slices.Sort(out[n])
	}
	return out, nil
}

// TestS14LabHosts: the lab's hosts and address book as the agents read
// them. Each Node's status.daemonEndpoints names its stand-in's port, and
// kwok leaves it there through a heartbeat stop and a re-initialization;
// the stand-in at the Node's InternalIP answers, a silenced one lets a
// dial time out (never refused), a revived one answers again; the
// members' EndpointSlice lists each agent's address with its node.
func TestS14LabHosts(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	// The agents' binary exits at once: this test looks at what the lab
	// writes for them, not at the agents.
	agents, err := scenario.StartGossipAgents(ctx, c, scenario.GossipAgentOptions{Binary: "/bin/true"})
	must(t, err)
	t.Cleanup(func() { scenario.StopAll(agents) })

	port := func(node string) int32 {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		must(t, err)
		return n.Status.DaemonEndpoints.KubeletEndpoint.Port
	}
	for i, n := range c.NodeNames {
		h := agents[n].Host
		if h.Address != sandbox.NodeAddress(i) || port(n) != int32(h.Port) {
			t.Errorf("%s: host at %s, Node's InternalIP %s and kubelet port %d", n, h.Endpoint(), sandbox.NodeAddress(i), port(n))
		}
		if got := probeHost(ctx, t, h.Endpoint()); got != gossip.HostAnswers {
			t.Errorf("%s's live host: %s", n, got)
		}
	}
	victim := c.NodeNames[1]
	must(t, c.StopNode(ctx, victim))
	must(t, c.WaitNodeReady(ctx, victim, false, time.Minute))
	must(t, c.StartNode(ctx, victim))
	must(t, c.WaitNodeReady(ctx, victim, true, time.Minute))
	if got, want := port(victim), int32(agents[victim].Host.Port); got != want {
		t.Errorf("%s's kubelet port is %d after kwok re-initialized it, want %d", victim, got, want)
	}

	must(t, agents[victim].Host.Silence())
	if got := probeHost(ctx, t, agents[victim].Host.Endpoint()); got != gossip.HostSilent {
		t.Errorf("%s's silenced host: %s, want silent", victim, got)
	}
	must(t, agents[victim].Host.Revive())
	if got := probeHost(ctx, t, agents[victim].Host.Endpoint()); got != gossip.HostAnswers {
		t.Errorf("%s's revived host: %s", victim, got)
	}

	eps, err := c.Client.DiscoveryV1().EndpointSlices(scenario.GossipNamespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + scenario.GossipService})
	must(t, err)
	got := map[string]string{}
	for _, s := range eps.Items {
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == "gossip-udp" && (p.Port == nil || *p.Port != scenario.GossipPort || p.Protocol == nil || *p.Protocol != corev1.ProtocolUDP) {
				t.Errorf("EndpointSlice %s: port gossip-udp %v/%v, want UDP %d", s.Name, p.Protocol, p.Port, scenario.GossipPort)
			}
		}
		for _, e := range s.Endpoints {
			if e.NodeName != nil && len(e.Addresses) > 0 {
				got[*e.NodeName] = e.Addresses[0]
			}
		}
	}
	for n, a := range agents {
		if got[n] != a.Address {
			t.Errorf("the members' EndpointSlices give %s at %q, want %s", n, got[n], a.Address)
		}
	}
}

// probeHost probes the stand-in at addr with the agents' own host probe
// (gossip.TCPHostProber, its default timeout).
func probeHost(ctx context.Context, t *testing.T, addr string) gossip.HostAnswer {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	must(t, err)
	return gossip.TCPHostProber{}.ProbeHost(ctx, ap)
}
