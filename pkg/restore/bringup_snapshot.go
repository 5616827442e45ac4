package restore

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/kubestatus"
	"rebound/pkg/rescue"
)

// nodeHealth combines the API's Ready condition with the Lease renewals
// seen, and prints each node's state when it changes: a Ready node whose
// Lease has not renewed within the observation bound is said to be
// probably dead (the bring-up goes on watching it).
func (b *bringup) nodeHealth(s *clusterState, now time.Time) map[string]NodeHealth {
	out := make(map[string]NodeHealth, len(s.nodes))
	ready, live := 0, 0
	overdue := now.Sub(b.start) >= b.observeFor
	for _, n := range s.nodes {
		h := NodeHealth{Ready: kubestatus.NodeReady(n), Heartbeat: b.beats.observe(n.Name, s.heartbeat[n.Name])}
		out[n.Name] = h
		if h.Ready {
			ready++
		}
		if h.Live() {
			live++
		}
		var what string
		switch {
		case !h.Ready:
			what = "NotReady"
		case h.Heartbeat:
			what = "Ready, Lease renewing: alive"
		case overdue:
			what = fmt.Sprintf("Ready in the API, but its Lease has not renewed in %s: probably dead (its Ready status may date from the backup); not a target, its pods do not count", b.observeFor.Round(time.Second))
		default:
			what = "Ready in the API, waiting to see its Lease renew (its Ready status may date from the backup)"
		}
		b.out.change("node/"+n.Name, what, "node %s: %s", n.Name, what)
	}
	b.result.ReadyNodes, b.result.LiveNodes = ready, live
	b.out.change("nodes", fmt.Sprint(ready, live), "nodes: %d of %d Ready in the API, %d of them seen alive (Lease renewing); replacements go only to those", ready, len(s.nodes), live)
	return out
}

// snapshot builds the planner's input with rescue.Build, as the
// controller and diagnose do: every node but those in without, every
// liveness signal, and of the essential workloads' namespaces only the
// essential pods and their owners.
func (b *bringup) snapshot(s *clusterState, now time.Time, without map[string]bool) rescue.Snapshot {
	nodes := s.nodes
	if len(without) > 0 {
		nodes = make([]*corev1.Node, 0, len(s.nodes))
		for _, n := range s.nodes {
			if !without[n.Name] {
				nodes = append(nodes, n)
			}
		}
	}
	src := rescue.Sources{
		Now:                now,
		Nodes:              nodes,
		Namespaces:         s.namespaces,
		PVCs:               s.pvcs,
		Policies:           []*v1alpha1.RecoveryPolicy{b.policy},
		Liveness:           b.livenessSignals(s, now),
		ZoneConfig:         b.opts.ZoneConfig,
		Defaults:           rescue.Defaults{ReplacementTimeout: b.opts.ReplacementTimeout},
		PreviousZones:      b.zones,
		PreviousDisruption: b.disruption,
	}
	seen := map[string]bool{}
	for _, r := range b.refs {
		for _, p := range s.podsOf(r) {
			seen[p.Namespace+"/"+p.Name] = true
		}
		src.Pods = append(src.Pods, s.podsOf(r)...)
		if d := s.workloads[r].deployment; d != nil {
			src.Deployments = append(src.Deployments, d)
			for _, rs := range s.replicaSets {
				if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == d.UID {
					src.ReplicaSets = append(src.ReplicaSets, rs)
				}
			}
		}
	}
	// The other pods of the Ready nodes hold resources a replacement
	// needs; the planner only sums them (they are on no NotReady node).
	for _, p := range s.nodePods {
		if k := p.Namespace + "/" + p.Name; !seen[k] {
			seen[k] = true
			src.Pods = append(src.Pods, p)
		}
	}
	snap, _ := rescue.Build(src)
	return snap
}

// criticalOf returns the plan's pods that belong to workload r.
func criticalOf(plan rescue.Plan, s *clusterState, r WorkloadRef) []rescue.CriticalPod {
	mine := map[string]bool{}
	for _, p := range s.podsOf(r) {
		mine[p.Name] = true
	}
	var out []rescue.CriticalPod
	for _, cp := range plan.Critical {
		if cp.Namespace == r.Namespace && mine[cp.Name] {
			out = append(out, cp)
		}
	}
	return out
}
