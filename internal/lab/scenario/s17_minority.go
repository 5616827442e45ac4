package scenario

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/linkcut"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/rescue"
)

// S17's minority partition: 2 of 5 nodes are cut off from everything
// (the API, their kubelets' heartbeats, the other agents' gossip and
// fencing probes, their hosts from the others' witnesses) while their
// agents and their stateful pods run on. Their agents lose every proof of
// being wanted, stop feeding, and their watchdogs reset them; the
// controller fences them only once they cannot be feeding, and their
// stateful pods run on the majority's side. The lab records each old pod's
// running window (until its node's reset) and its replacement's creation:
// never two copies at once.

// S17MinorityResult is what RunS17Minority found, per minority node.
// Times are the API's.
type S17MinorityResult struct {
	// CutAt is the partition as the API dates it.
	CutAt time.Time         `json:"cutAt"`
	Nodes []S17MinorityNode `json:"nodes"`
	// MajorityResets are the majority's nodes their watchdog reset.
	MajorityResets []string `json:"majorityResets,omitempty"`
	// MajorityTainted are the majority's nodes seen with the taint.
	MajorityTainted []string `json:"majorityTainted,omitempty"`
}

// S17MinorityNode is one cut-off node's story.
type S17MinorityNode struct {
	Node string `json:"node"`
	// ResetAt is its watchdog's reset: the end of its old pod's run.
	ResetAt time.Time `json:"resetAt"`
	// FencedAt is its out-of-service taint's timeAdded.
	FencedAt time.Time `json:"fencedAt"`
	// ReplacementCreated is when the replacement pod was created (the
	// earliest it could run); Overlap is how long it existed before the
	// reset ended the old one (0: never two at once).
	ReplacementCreated time.Time     `json:"replacementCreated"`
	Overlap            time.Duration `json:"overlap"`
	// RunningElsewhere is from the cut to the replacement's Ready.
	RunningElsewhere time.Duration `json:"runningElsewhere"`
	MovedTo          string        `json:"movedTo"`
}

// RunS17Minority plays the minority partition on a 5-node sandbox with
// S17's rebound (the agents with fencing, GossipAgentOptions.Fencing):
// minority are the nodes cut off.
func RunS17Minority(ctx context.Context, c *sandbox.Cluster, tl *Timeline, agents map[string]*GossipAgent, minority []string, rescueTimeout time.Duration) (S17MinorityResult, error) {
	var res S17MinorityResult
	var majority []string
	for _, n := range slices.Sorted(maps.Keys(agents)) {
		if !slices.Contains(minority, n) {
			majority = append(majority, n)
		}
	}
	if len(minority) == 0 || len(minority)*2 >= len(agents) {
		return res, fmt.Errorf("S17 minority: %v is not a minority of %d agents", minority, len(agents))
	}
	tl.Step("wait until every agent reports its watchdog armed")
	if err := WaitFencingArmed(ctx, c, agents, 2*time.Minute); err != nil {
		return res, err
	}
	old := map[string]types.UID{}
	for _, n := range minority {
		uid, err := placeStatefulSet(ctx, c, tl, "db-"+n, n)
		if err != nil {
			return res, err
		}
		old[n] = uid
	}

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	tainted := watchOutOfService(wctx, c)

	tl.Step("%s are cut off from everything: the API, their kubelets' heartbeats, the other agents; their agents run on", strings.Join(minority, ", "))
	var err error
	if res.CutAt, err = markEvent(ctx, c, minority[0], "LabPartition", fmt.Sprintf("the lab: %v are cut off from %v and from the API", minority, majority)); err != nil {
		return res, err
	}
	if err := Partition(agents, minority, majority); err != nil {
		return res, err
	}
	for _, n := range minority {
		if err := agents[n].CutAPI(); err != nil {
			return res, err
		}
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
		if err := agents[n].Host.Silence(); err != nil {
			return res, err
		}
	}

	for _, n := range minority {
		name := "db-" + n + "-0"
		moved, err := waitPodNamed(ctx, c, name, time.Until(res.CutAt.Add(rescueTimeout)), func(p *corev1.Pod) bool {
			return p.UID != old[n] && p.Spec.NodeName != "" && !slices.Contains(minority, p.Spec.NodeName) && kubestatus.PodReady(p)
		})
		if err != nil {
			return res, fmt.Errorf("S17 minority: %w", err)
		}
		_, ready := kubestatus.PodReadySince(moved)
		r := S17MinorityNode{Node: n, MovedTo: moved.Spec.NodeName, RunningElsewhere: ready.Sub(res.CutAt), ReplacementCreated: moved.CreationTimestamp.Time}
		resets := agents[n].Resets()
		if len(resets) == 0 {
			// The replacement runs while the old pod's node was never
			// reset: its run has not ended.
			r.Overlap = time.Since(r.ReplacementCreated)
		} else {
			r.ResetAt = resets[0]
			r.Overlap = max(0, r.ResetAt.Sub(r.ReplacementCreated))
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err == nil {
			for _, t := range node.Spec.Taints {
				if rescue.IsFencingTaint(&t) && t.TimeAdded != nil {
					r.FencedAt = t.TimeAdded.Time
				}
			}
		}
		tl.Add("pod", name, "Running and Ready on %s, %.1fs after the cut; %s reset at +%.0fs, replacement created at +%.0fs (overlap %s)",
			r.MovedTo, r.RunningElsewhere.Seconds(), n, r.ResetAt.Sub(res.CutAt).Seconds(), r.ReplacementCreated.Sub(res.CutAt).Seconds(), r.Overlap)
		res.Nodes = append(res.Nodes, r)
	}

	tl.Step("heal: %s come back on a new boot", strings.Join(minority, ", "))
	if err := Heal(agents); err != nil {
		return res, err
	}
	for _, n := range minority {
		if err := agents[n].RestoreAPI(); err != nil {
			return res, err
		}
		if err := agents[n].Return(ctx); err != nil {
			return res, err
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range minority {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return rescue.IsFencingTaint(&t) }) {
				return false, nil //nolint:nilerr // poll until the deadline
			}
		}
		return true, nil
	})
	if err != nil {
		return res, fmt.Errorf("S17 minority: the taint is still on a returned node: %w", err)
	}
	tl.Step("the out-of-service taints are off the returned nodes")
	stopWatch()
	for _, n := range tainted() {
		if !slices.Contains(minority, n) {
			res.MajorityTainted = append(res.MajorityTainted, n)
		}
	}
	for _, n := range majority {
		if len(agents[n].Resets()) > 0 {
			res.MajorityResets = append(res.MajorityResets, n)
		}
	}
	return res, nil
}

// Partition cuts every link between the groups' agents (gossip and
// fencing probes; GossipAgent.CutFile); links within a group stay.
func Partition(agents map[string]*GossipAgent, groups ...[]string) error {
	for i, g := range groups {
		var cut []netip.Addr
		for j, other := range groups {
			if j == i {
				continue
			}
			for _, n := range other {
				a, err := netip.ParseAddr(agents[n].Address)
				if err != nil {
					return err
				}
				cut = append(cut, a)
			}
		}
		for _, n := range g {
			if agents[n].CutFile == "" {
				return fmt.Errorf("the agent of %s has no cut file (GossipAgentOptions.Fencing)", n)
			}
			if err := linkcut.Write(agents[n].CutFile, cut...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal restores every link Partition cut.
func Heal(agents map[string]*GossipAgent) error {
	for _, a := range agents {
		if a.CutFile != "" {
			if err := linkcut.Write(a.CutFile); err != nil {
				return err
			}
		}
	}
	return nil
}
