package scenario

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/gossipforge"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
)

// S14: forged and lost planes. The second plane of S13's detection must
// be first-hand about the host and impossible for another node to forge:
// a forged membership, members rolling or down, and a key rotation must
// never turn into a Dead vote or an early action while the host lives,
// and a host that dies must still be found as in S13. Each runner plays
// one case on a sandbox where rebound's controller runs with the Lease
// plane and every node has a gossip agent and a host stand-in
// (StartGossipAgents); a critical pod on the victim stands to be moved by
// a wrong verdict. The sandbox runs S14Timings: its node grace is longer
// than S14Stall, so upstream does nothing in a stall and any action
// rebound takes in one is early.

// S14Stall is how long a node's kubelet stops renewing its Lease in S14
// (a kubelet restart, a short cut from the API).
const S14Stall = 25 * time.Second

// S14Timings are the sandbox's fast timings (Lease renewed every 2 s)
// with a node grace of 40 s, longer than S14Stall.
func S14Timings() sandbox.Timings {
	t := sandbox.FastTimings()
	t.NodeMonitorGracePeriod = 40 * time.Second
	return t
}

// S14VerdictBound is how soon after a host's death S14 wants the taint:
// S13's bound, the fast timings' node grace.
var S14VerdictBound = sandbox.FastTimings().NodeMonitorGracePeriod

// S14Env is what every S14 runner plays on.
type S14Env struct {
	C      *sandbox.Cluster
	TL     *Timeline
	Agents map[string]*GossipAgent
	// Victim is the node the case is about; the critical pod runs there.
	Victim string
}

// S14Result is what an S14 runner measured.
type S14Result struct {
	// EarlyActions are rebound's controller's node writes, pod status
	// writes and pod deletions (the audit log) while the victim's host
	// lived.
	EarlyActions []string
	// DeadVotes are the Dead watches any report held while the victim's
	// host lived (about the victim, or about anyone in a rollout or a
	// rotation).
	DeadVotes []DeadVote
	// Disagreed are the nodes and reasons the controller's disagreement
	// gauge showed during a rollout; DisagreementLeft what it still showed
	// at the end (want none).
	Disagreed, DisagreementLeft map[string][]string
	// MemberDownBy are the reporters that held the victim MemberDown once
	// its member was killed.
	MemberDownBy []string
	// Verdict is the taint's timeAdded after the victim's host died.
	Verdict time.Duration
}

// s14Prepare puts the critical pod on the victim, waits for the gossip
// membership to have formed and starts the planes' recorder.
func s14Prepare(ctx context.Context, env S14Env) (*PlaneRecorder, error) {
	c := env.C
	if env.Agents[env.Victim] == nil {
		return nil, fmt.Errorf("S14: no gossip agent on the victim %q", env.Victim)
	}
	w := CriticalStandIn(env.Victim)
	if err := w.Create(ctx, c.Client); err != nil {
		return nil, err
	}
	var where string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
		if err != nil || len(pods.Items) != 1 {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		where = pods.Items[0].Spec.NodeName
		return where == env.Victim && kubestatus.PodReady(&pods.Items[0]), nil
	})
	if err != nil {
		return nil, fmt.Errorf("S14: %s not Ready on %s (on %q): %w", w, env.Victim, where, err)
	}
	env.TL.Step("%s Ready on %s", w, env.Victim)
	if err := WaitGossipMembership(ctx, c, slices.Collect(maps.Keys(env.Agents)), time.Minute); err != nil {
		return nil, err
	}
	env.TL.Step("the gossip membership has formed: %d members, every watch Alive", len(env.Agents))
	return RecordPlanes(ctx, c, env.TL)
}

// WaitGossipMembership waits until each of nodes has a gossip read, and
// every watch of every read is Alive, each node watched by at least one
// other. (An agent rewrites its read when a watch changes and refreshes
// it only at its report interval: its members count may be older than
// its watches.)
func WaitGossipMembership(ctx context.Context, c *sandbox.Cluster, nodes []string, timeout time.Duration) error {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		watched := map[string]bool{}
		for _, n := range nodes {
			var r v1alpha1.PeeringReport
			if err := cl.Get(ctx, client.ObjectKey{Name: n}, &r); err != nil || r.Gossip == nil {
				last = fmt.Sprintf("%s: no gossip read (%v)", n, err)
				return false, nil //nolint:nilerr // not written yet
			}
			for _, w := range r.Gossip.Watches {
				if w.State != string(liveness.GossipAlive) {
					last = fmt.Sprintf("%s watches %s %s", n, w.Node, w.State)
					return false, nil
				}
				watched[w.Node] = true
			}
		}
		for _, n := range nodes {
			if !watched[n] {
				last = fmt.Sprintf("nobody watches %s Alive", n)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("S14: the gossip membership of %d members did not form within %s (%s): %w", len(nodes), timeout, last, err)
	}
	return nil
}

// hold waits d, or less if ctx ends: S14 watches for something that must
// not happen, for a set time.
func hold(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d): // a window with nothing to poll for
		return nil
	}
}

// stall stops node's Lease for d and resumes it, then waits for a
// renewal.
func stall(ctx context.Context, c *sandbox.Cluster, tl *Timeline, node string, d time.Duration) error {
	tl.Step("%s's kubelet stops renewing its Lease for %s", node, d)
	if err := c.StopNode(ctx, node); err != nil {
		return err
	}
	if err := hold(ctx, d); err != nil {
		return err
	}
	resumed := time.Now()
	if err := c.StartNode(ctx, node); err != nil {
		return err
	}
	tl.Step("%s's kubelet renews its Lease again", node)
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		return l.Spec.RenewTime.After(resumed.Add(-time.Second)), nil
	})
}

func s14Actions(c *sandbox.Cluster, from time.Time) ([]string, error) {
	evs, err := EarlyActions(c, from)
	return DescribeActions(evs), err
}

// readGossipKeys reads a key file's keys (base64, one a line).
func readGossipKeys(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k := strings.TrimSpace(sc.Text()); k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no key in %s", path)
	}
	return keys, sc.Err()
}

// RunS14Forged: the member on forger, a key holder, sends every member
// the forged sequence about the live victim (gossipforge.ForgedSequence:
// left at the highest incarnation, alive at an address where nothing
// answers, dead); then the victim's kubelet stops renewing for S14Stall.
// Want: no Dead vote about the victim, no early action.
func RunS14Forged(ctx context.Context, env S14Env, forger string) (S14Result, error) {
	var res S14Result
	fa := env.Agents[forger]
	if fa == nil || forger == env.Victim {
		return res, fmt.Errorf("S14: the forger %q must be another node with a gossip agent", forger)
	}
	rec, err := s14Prepare(ctx, env)
	if err != nil {
		return res, err
	}
	defer rec.Stop()
	keys, err := readGossipKeys(fa.KeyFile)
	if err != nil {
		return res, err
	}
	key, err := base64.StdEncoding.DecodeString(keys[0])
	if err != nil {
		return res, fmt.Errorf("S14: %s's key: %w", forger, err)
	}
	victimAddr, err := netip.ParseAddr(env.Agents[env.Victim].Address)
	if err != nil {
		return res, err
	}
	b := victimAddr.As4()
	b[3] = 250 // on the agents' network, where no member listens
	bogus := netip.AddrPortFrom(netip.AddrFrom4(b), GossipPort)
	var to []netip.AddrPort
	for _, n := range slices.Sorted(maps.Keys(env.Agents)) {
		to = append(to, netip.AddrPortFrom(netip.MustParseAddr(env.Agents[n].Address), GossipPort))
	}
	from := time.Now()
	seq := gossipforge.ForgedSequence(env.Victim, bogus)
	env.TL.Step("%s (a key holder) sends every member: %v", forger, seq)
	if err := (gossipforge.Forger{Key: key, From: forger}).SendAll(to, seq...); err != nil {
		return res, err
	}
	// The forged state spreads and the watchers probe; a vote it caused
	// would be written within a few seconds.
	if err := hold(ctx, 5*time.Second); err != nil {
		return res, err
	}
	if err := stall(ctx, env.C, env.TL, env.Victim, S14Stall); err != nil {
		return res, err
	}
	if err := hold(ctx, 3*time.Second); err != nil {
		return res, err
	}
	res.DeadVotes = rec.DeadVotes(env.Victim)
	res.EarlyActions, err = s14Actions(env.C, from)
	return res, err
}

// S14RolloutOptions tune RunS14Rollout.
type S14RolloutOptions struct {
	// Down is how long each member stays stopped (default 6 s).
	Down time.Duration
	// Disagreement, when set, reads the controller's disagreement gauge:
	// the reasons by node it shows now. The runner samples it throughout
	// and waits for it to fall back to nothing.
	Disagreement func(context.Context) (map[string][]string, error)
}

// RunS14Rollout: the members restart one after another, as a DaemonSet's
// rollout restarts them (graceful stop, a pause, start, wait for it to be
// back in the membership), and the victim's Lease stalls for S14Stall,
// from just before its own member stops until well after it is back. Want: no Dead vote, no early
// action, and the disagreement gauge rising for the stopped members and
// falling back to nothing.
func RunS14Rollout(ctx context.Context, env S14Env, opts S14RolloutOptions) (S14Result, error) {
	var res S14Result
	if opts.Down <= 0 {
		opts.Down = 6 * time.Second
	}
	rec, err := s14Prepare(ctx, env)
	if err != nil {
		return res, err
	}
	defer rec.Stop()
	from := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	seen := map[string]map[string]bool{}
	var now map[string][]string
	var scrapeErr error
	var mu sync.Mutex
	if opts.Disagreement != nil {
		sampled.Add(1)
		go func() {
			defer sampled.Done()
			for sctx.Err() == nil {
				got, err := opts.Disagreement(sctx)
				if err != nil {
					mu.Lock()
					scrapeErr = err
					mu.Unlock()
				} else {
					mu.Lock()
					logDisagreement(env.TL, now, got)
					now = got
					for n, reasons := range got {
						if seen[n] == nil {
							seen[n] = map[string]bool{}
						}
						for _, r := range reasons {
							seen[n][r] = true
						}
					}
					mu.Unlock()
				}
				select {
				case <-sctx.Done():
				case <-time.After(500 * time.Millisecond): // the next scrape
				}
			}
		}()
	}
	defer func() { stopSampling(); sampled.Wait() }()

	nodes := slices.Sorted(maps.Keys(env.Agents))
	stalled := make(chan error, 1)
	for _, n := range nodes {
		a := env.Agents[n]
		if n == env.Victim {
			// The Lease stalls first, so that the victim's member is down
			// all the while its Lease is stale: the case where a plane
			// that took a stopped member for a dead host would act.
			go func() { stalled <- stall(ctx, env.C, env.TL, env.Victim, S14Stall) }()
			if err := hold(ctx, s14StaleAfter(env.C)); err != nil {
				return res, err
			}
		}
		env.TL.Step("rollout: %s's member stops (SIGTERM)", n)
		a.Stop()
		if err := hold(ctx, opts.Down); err != nil {
			return res, err
		}
		if err := a.Restart(); err != nil {
			return res, err
		}
		// Its watchers hold it MemberDown by now (a graceful leave is
		// seen at once): the rollout goes on once they hold it Alive.
		env.TL.Step("rollout: %s's member starts again", n)
		if err := WaitGossipMembership(ctx, env.C, nodes, time.Minute); err != nil {
			return res, fmt.Errorf("rollout at %s: %w", n, err)
		}
	}
	if err := <-stalled; err != nil {
		return res, err
	}
	env.TL.Step("rollout done")
	if opts.Disagreement != nil {
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return now != nil && len(now) == 0, nil
		})
		mu.Lock()
		res.Disagreed = map[string][]string{}
		for n, rs := range seen {
			res.Disagreed[n] = slices.Sorted(maps.Keys(rs))
		}
		res.DisagreementLeft = maps.Clone(now)
		never := now == nil
		mu.Unlock()
		if never {
			return res, fmt.Errorf("S14: the disagreement gauge was never read: %w", scrapeErr)
		}
		if err != nil {
			env.TL.Step("the disagreement gauge still shows %v a minute after the rollout", res.DisagreementLeft)
		}
	}
	res.DeadVotes = rec.DeadVotes("")
	res.EarlyActions, err = s14Actions(env.C, from)
	return res, err
}

// s14StaleAfter is how long a stopped Lease takes to be stale on
// rebound's clock: a renew interval and the 2 s margin, with a second to
// spare.
func s14StaleAfter(c *sandbox.Cluster) time.Duration {
	return c.Timings.NodeLeaseDuration/4 + 3*time.Second
}

// logDisagreement writes each node's disagreement as it rises or falls.
func logDisagreement(tl *Timeline, before, after map[string][]string) {
	for _, n := range slices.Sorted(maps.Keys(after)) {
		if !slices.Equal(before[n], after[n]) {
			tl.Add("gauge", n, "rebound_gossip_disagreement: %s", strings.Join(after[n], ","))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[n]; !ok {
			tl.Add("gauge", n, "rebound_gossip_disagreement: gone")
		}
	}
}

// RunS14KeyRotation rotates the gossip key on the running membership
// through the agents' keyrings: every key file becomes "old, new", then
// "new, old", then "new", each step given the agents' reload interval
// and the gossip's settling before the next. Want: the membership whole
// after every step and no Dead vote.
func RunS14KeyRotation(ctx context.Context, env S14Env) (S14Result, error) {
	var res S14Result
	rec, err := s14Prepare(ctx, env)
	if err != nil {
		return res, err
	}
	defer rec.Stop()
	from := time.Now()
	nodes := slices.Sorted(maps.Keys(env.Agents))
	oldKeys, err := readGossipKeys(env.Agents[nodes[0]].KeyFile)
	if err != nil {
		return res, err
	}
	old := oldKeys[0]
	next, err := NewGossipKey()
	if err != nil {
		return res, err
	}
	for _, step := range []struct {
		what string
		keys []string
	}{
		{"install the new key beside the old one", []string{old, next}},
		{"encrypt with the new key, still accept the old", []string{next, old}},
		{"remove the old key", []string{next}},
	} {
		env.TL.Step("key rotation: %s, node by node", step.what)
		for _, n := range nodes {
			if err := WriteGossipKeys(env.Agents[n].KeyFile, step.keys...); err != nil {
				return res, err
			}
		}
		// Each agent re-reads its file within the reload interval; a
		// member that could no longer read another would be suspected,
		// and show in its watchers' reads, within seconds.
		if err := hold(ctx, 3*GossipKeyReloadInterval+5*time.Second); err != nil {
			return res, err
		}
		if err := WaitGossipMembership(ctx, env.C, nodes, 30*time.Second); err != nil {
			return res, fmt.Errorf("key rotation, %s: %w", step.what, err)
		}
	}
	if err := hold(ctx, 5*time.Second); err != nil {
		return res, err
	}
	if err := WaitGossipMembership(ctx, env.C, nodes, 30*time.Second); err != nil {
		return res, fmt.Errorf("key rotation done: %w", err)
	}
	env.TL.Step("key rotation done: every member on the new key alone")
	res.DeadVotes = rec.DeadVotes("")
	res.EarlyActions, err = s14Actions(env.C, from)
	return res, err
}

// S14MemberDownWindow is how long RunS14HostAliveMemberDown watches the
// victim with its member killed and its host alive.
const S14MemberDownWindow = 12 * time.Second

// RunS14HostAliveMemberDown: the victim's member is killed (SIGKILL)
// while its host answers: its watchers must say MemberDown, no report
// Dead, and rebound must not act, for S14MemberDownWindow. Then the host
// dies too (silent, its Lease stopped): the taint must come as in S13.
func RunS14HostAliveMemberDown(ctx context.Context, env S14Env) (S14Result, error) {
	var res S14Result
	rec, err := s14Prepare(ctx, env)
	if err != nil {
		return res, err
	}
	defer rec.Stop()
	a := env.Agents[env.Victim]
	from := time.Now()
	env.TL.Step("%s's member is killed (SIGKILL); its host and its Lease live on", env.Victim)
	if err := a.Kill(); err != nil {
		return res, err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		res.MemberDownBy = nil
		for rep, s := range rec.Watches(env.Victim) {
			if s == string(liveness.GossipMemberDown) {
				res.MemberDownBy = append(res.MemberDownBy, rep)
			}
		}
		return len(res.MemberDownBy) > 0, nil
	})
	slices.Sort(res.MemberDownBy)
	if err != nil {
		return res, fmt.Errorf("S14: no watcher says %s MemberDown 30s after its member died (watches %v)", env.Victim, rec.Watches(env.Victim))
	}
	env.TL.Step("%v say %s MemberDown", res.MemberDownBy, env.Victim)
	if err := hold(ctx, S14MemberDownWindow); err != nil {
		return res, err
	}
	res.DeadVotes = rec.DeadVotes(env.Victim)
	if res.EarlyActions, err = s14Actions(env.C, from); err != nil {
		return res, err
	}

	env.TL.Step("%s's host dies too: it drops every packet, its Lease stops", env.Victim)
	died := time.Now()
	if err := a.Host.Silence(); err != nil {
		return res, err
	}
	if err := env.C.StopNode(ctx, env.Victim); err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res.Verdict, err = s13Taint(wctx, env.C, env.Victim, died)
	if err != nil {
		return res, fmt.Errorf("S14: %w within a minute of the host's death", err)
	}
	env.TL.Step("%s tainted %s %.1fs after its host died", env.Victim, UnreachableTaint, res.Verdict.Seconds())
	return res, nil
}
