package scenario

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
)

// S17's negative lanes: what is not a dead node, played while every
// agent fences and a stateful pod waits on node-3, under S17Policy. In
// each, rebound must put the out-of-service taint on no node, and no
// watchdog may reset its node: a fencer that acts on any of them is worse
// than upstream's stall.

// S17Lane is one negative lane.
type S17Lane struct {
	// Name is the lane's name in tests and METRIC lines.
	Name string
	// Describe says what the lane does, for people.
	Describe string
	// Window is how long its cut lasts: past the node grace (50 s), the
	// fencing wait (T + 2W + margin) and the sanction window T, with room.
	Window time.Duration
	play   func(ctx context.Context, env s17Env) error
}

type s17Env struct {
	c      *sandbox.Cluster
	tl     *Timeline
	agents map[string]*GossipAgent
	window time.Duration
}

// S17QuietResult is what a negative lane found.
type S17QuietResult struct {
	// Tainted are the nodes seen with the out-of-service taint, from the
	// lane's start through its settle time.
	Tainted []string
	// Resets are the nodes their watchdog stand-in reset.
	Resets []string
}

// S17Lanes are the negative lanes.
func S17Lanes() []S17Lane {
	return []S17Lane{
		{Name: "ControlPlaneDown", Window: 3 * time.Minute, Describe: "the kube-apiserver stops for the window: every kubelet, agent and the controller lose the API at once", play: func(ctx context.Context, env s17Env) error {
			env.tl.Step("kube-apiserver stops for %s", env.window)
			if err := env.c.StopComponent(sandbox.APIServer, 5*time.Second); err != nil {
				return err
			}
			if err := sleep(ctx, env.window); err != nil {
				return err
			}
			env.tl.Step("kube-apiserver starts again")
			return env.c.StartComponent(ctx, sandbox.APIServer)
		}},
		{Name: "OneNodeReachesTheAPI", Window: 2 * time.Minute, Describe: "S16's shape: node-0's kubelet and agent keep the API, the workers' lose it for the window; gossip goes on", play: func(ctx context.Context, env s17Env) error {
			workers := slices.DeleteFunc(slices.Sorted(maps.Keys(env.agents)), func(n string) bool { return n == "node-0" })
			env.tl.Step("the kubelets and agents of %v lose the API for %s; node-0 keeps it", workers, env.window)
			for _, n := range workers {
				if err := env.agents[n].CutAPI(); err != nil {
					return err
				}
				if err := env.c.StopNode(ctx, n); err != nil {
					return err
				}
			}
			if err := sleep(ctx, env.window); err != nil {
				return err
			}
			env.tl.Step("the workers reach the API again")
			for _, n := range workers {
				if err := env.agents[n].RestoreAPI(); err != nil {
					return err
				}
				if err := env.c.StartNode(ctx, n); err != nil {
					return err
				}
			}
			return nil
		}},
		{Name: "Stall", Window: 2 * time.Minute, Describe: "S15's stall: every kubelet loses the API for the window, the agents keep it", play: func(ctx context.Context, env s17Env) error {
			env.tl.Step("every kubelet loses the API for %s; the agents keep it", env.window)
			for _, n := range env.c.NodeNames {
				if err := env.c.StopNode(ctx, n); err != nil {
					return err
				}
			}
			if err := sleep(ctx, env.window); err != nil {
				return err
			}
			env.tl.Step("the kubelets reach the API again")
			for _, n := range env.c.NodeNames {
				if err := env.c.StartNode(ctx, n); err != nil {
					return err
				}
			}
			return nil
		}},
		{Name: "AgentRollout", Describe: "every agent restarts, one after another (SIGTERM, as a DaemonSet rollout), each re-arming before the next", play: func(ctx context.Context, env s17Env) error {
			for _, n := range slices.Sorted(maps.Keys(env.agents)) {
				env.tl.Step("rollout: %s's agent stops (SIGTERM) and starts again", n)
				env.agents[n].Stop()
				if err := env.agents[n].Restart(); err != nil {
					return err
				}
				if err := WaitFencingArmed(ctx, env.c, env.agents, 2*time.Minute); err != nil {
					return fmt.Errorf("rollout at %s: %w", n, err)
				}
			}
			return nil
		}},
		{Name: "MemberDown", Window: 2 * time.Minute, Describe: "node-3's member is down (its agent stopped) and its Lease stalls for the window, while its host answers", play: func(ctx context.Context, env s17Env) error {
			a := env.agents["node-3"]
			env.tl.Step("node-3's agent stops (SIGTERM) and its Lease stalls for %s; its host answers", env.window)
			a.Stop()
			if err := env.c.StopNode(ctx, "node-3"); err != nil {
				return err
			}
			if err := sleep(ctx, env.window); err != nil {
				return err
			}
			env.tl.Step("node-3's kubelet and agent are back")
			if err := env.c.StartNode(ctx, "node-3"); err != nil {
				return err
			}
			return a.Restart()
		}},
	}
}

// RunS17Quiet plays lane on a sandbox where every agent fences (S17's
// setup): the stateful pod on node-3, the lane, then settle (the fencing
// wait and more) watching on; it counts the taints and the resets.
func RunS17Quiet(ctx context.Context, c *sandbox.Cluster, tl *Timeline, agents map[string]*GossipAgent, lane S17Lane, settle time.Duration) (S17QuietResult, error) {
	var res S17QuietResult
	tl.Step("wait until every agent reports its watchdog armed")
	if err := WaitFencingArmed(ctx, c, agents, 2*time.Minute); err != nil {
		return res, err
	}
	if _, err := placeStatefulStandIn(ctx, c, tl, "node-3"); err != nil {
		return res, err
	}
	wctx, stop := context.WithCancel(ctx)
	tainted := watchOutOfService(wctx, c)
	defer stop()
	tl.Step("lane %s: %s", lane.Name, lane.Describe)
	if err := lane.play(ctx, s17Env{c: c, tl: tl, agents: agents, window: lane.Window}); err != nil {
		return res, err
	}
	tl.Step("settle: watch on for %s", settle)
	if err := sleep(ctx, settle); err != nil {
		return res, err
	}
	stop()
	res.Tainted = tainted()
	for _, n := range slices.Sorted(maps.Keys(agents)) {
		if len(agents[n].Resets()) > 0 {
			res.Resets = append(res.Resets, n)
		}
	}
	tl.Add("step", "", "lane %s: tainted %v, reset %v", lane.Name, res.Tainted, res.Resets)
	return res, nil
}

// watchOutOfService polls every node for the out-of-service taint until
// ctx ends; the function returns the nodes seen with it.
func watchOutOfService(ctx context.Context, c *sandbox.Cluster) func() []string {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // the API may be down: poll on
			}
			mu.Lock()
			defer mu.Unlock()
			for _, n := range nodes.Items {
				if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService }) {
					seen[n.Name] = true
				}
			}
			return false, nil
		})
	}()
	return func() []string {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(seen))
	}
}
