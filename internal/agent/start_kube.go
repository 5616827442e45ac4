package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/kube"
)

// statusReader is the optional part of Control that tells whether BIRD is
// in graceful-restart recovery; bird.Client implements it.
type statusReader interface {
	Status(ctx context.Context) (bird.Status, error)
}

// birdStarting reports whether BIRD is not running or still in
// graceful-restart recovery: then the start rule applies. A Control that
// cannot tell (tests' fakes) means BIRD is running and settled.
func (a *Agent) birdStarting(ctx context.Context) bool {
	sr, ok := a.opts.Control.(statusReader)
	if !ok {
		return false
	}
	st, err := sr.Status(ctx)
	return err != nil || st.GracefulRestart != nil
}

// startView turns the set's Nodes into the start rule's input, at now.
// What it reads (Ready conditions, the agents' session reports) is the
// Node-annotation contract of pkg/peering/kube; the rule itself
// (StartPeers) does not depend on it.
func (a *Agent) startView(ctx context.Context, nodes []*corev1.Node, peers []bird.Peer, now time.Time) []StartPeer {
	maxAge := 3 * a.opts.ReportInterval
	var reporters []Reporter
	for _, n := range nodes {
		if n.Name == a.opts.NodeName {
			continue
		}
		ready, _ := kube.Ready(n)
		r, fresh := kube.Report(n, now, maxAge)
		if !fresh {
			continue
		}
		est := r.Established()
		reporters = append(reporters, Reporter{Name: n.Name, Working: ready && anyTrue(est), Sessions: est})
	}
	local := map[string]bool{}
	if protos, err := a.opts.Control.Protocols(ctx); err == nil {
		for name, st := range sessionStates(peers, protos) {
			local[name] = st == "Established"
		}
	}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	out := make([]StartPeer, 0, len(peers))
	for _, p := range peers {
		sp := StartPeer{Peer: p, LocalEstablished: local[p.Name]}
		if n := byName[p.Name]; n != nil {
			sp.Ready, _ = kube.Ready(n)
		}
		// Until the set publishes alive evidence with state-change times,
		// a working reporter's Established session stands for it.
		for _, r := range reporters {
			if r.Working && r.Sessions[p.Name] {
				sp.Alive = true
			}
		}
		sp.Unreachable = LostByMesh(p.Name, reporters)
		out = append(out, sp)
	}
	return out
}

func anyTrue(m map[string]bool) bool {
	for _, v := range m {
		if v {
			return true
		}
	}
	return false
}
