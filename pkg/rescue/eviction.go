package rescue

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/zone"
)

// upstreamEviction is when kube-controller-manager's taint-eviction
// controller will delete a pod from its NotReady node on its own, and how
// the planner knows.
type upstreamEviction struct {
	// at is the eviction time; zero means never.
	at time.Time
	// estimated is true when the node has no eviction taint yet and at
	// comes from the zone's tainting rate. An estimate is counted from now,
	// so it moves with time; a taint's timeAdded does not.
	estimated bool
	reason    string
}

// evictionFor predicts upstream's eviction of a pod bound to a NotReady
// node.
//
// A node already tainted (node.kubernetes.io/unreachable or not-ready,
// NoExecute): the pod goes at the taint's timeAdded plus the pod's
// tolerationSeconds for it, mirroring processPodOnNode and
// getMinTolerationTime in k8s.io/kubernetes
// pkg/controller/tainteviction/taint_eviction.go. No toleration means at
// once; a toleration without seconds means never.
//
// A node not tainted yet: the taint comes at the zone's rate (pkg/zone:
// rate 0, as in a small PartialDisruption zone, means never), at the
// latest bound of zone.EvictionETA for the node's place in the queue, then
// the toleration runs. The latest bound is used because rebound must act
// when upstream will not surely be in time.
//
// Other NoExecute taints (out-of-service included) are ignored: rebound acts
// on fenced nodes itself rather than leave the pod to upstream's pod GC.
func evictionFor(pod *corev1.Pod, node *nodeState, zones *zone.Cluster, now time.Time) upstreamEviction {
	if len(node.evictionTaints) > 0 {
		return evictionByTaints(pod, node.evictionTaints, now)
	}

	key := corev1.TaintNodeUnreachable
	if node.readyStatus == corev1.ConditionFalse {
		key = corev1.TaintNodeNotReady
	}
	z, _ := zones.Zone(node.zone)
	_, latest, ok := zone.EvictionETA(z.Rate, node.ahead)
	if !ok {
		return upstreamEviction{reason: fmt.Sprintf(
			"node not tainted yet and zone %s is %s with NoExecute tainting rate %g/s: upstream never evicts (%s)",
			zone.DisplayZone(node.zone), z.State, z.Rate, z.RateReason)}
	}
	taintAt := now.Add(latest)
	queue := fmt.Sprintf("node not tainted yet; zone %s (%s) taints at %g/s with %d node(s) ahead: %s expected by %s",
		zone.DisplayZone(node.zone), z.State, z.Rate, node.ahead, key, formatTime(taintAt))
	tol, tolerated, forever := tolerationFor(pod, key, "")
	switch {
	case forever:
		return upstreamEviction{estimated: true, reason: queue + ", but the pod tolerates it without tolerationSeconds: upstream never evicts"}
	case !tolerated:
		return upstreamEviction{at: taintAt, estimated: true, reason: queue + ", the pod does not tolerate it: evicted then"}
	default:
		at := taintAt.Add(tol)
		return upstreamEviction{at: at, estimated: true, reason: fmt.Sprintf("%s, + toleration %s: upstream evicts about %s",
			queue, tol, formatTime(at))}
	}
}

// evictionByTaints is the earliest eviction any of the node's eviction
// taints causes.
func evictionByTaints(pod *corev1.Pod, taints []*corev1.Taint, now time.Time) upstreamEviction {
	var best upstreamEviction
	var forever []string
	for _, t := range taints {
		added := now // a taint without timeAdded: the eviction clock starts when upstream sees it, at the latest now
		if t.TimeAdded != nil {
			added = t.TimeAdded.Time
		}
		tol, tolerated, never := tolerationFor(pod, t.Key, t.Value)
		if never {
			forever = append(forever, t.Key)
			continue
		}
		at := added.Add(tol)
		if !best.at.IsZero() && !at.Before(best.at) {
			continue
		}
		best.at = at
		if tolerated {
			best.reason = fmt.Sprintf("node tainted %s:NoExecute at %s, the pod tolerates it for %s: upstream evicts at %s",
				t.Key, formatTime(added), tol, formatTime(at))
		} else {
			best.reason = fmt.Sprintf("node tainted %s:NoExecute at %s and the pod does not tolerate it: upstream evicts at once",
				t.Key, formatTime(added))
		}
	}
	if best.at.IsZero() {
		best.reason = fmt.Sprintf("the pod tolerates %v without tolerationSeconds: upstream never evicts", forever)
	}
	return best
}

// tolerationFor mirrors upstream's choice of tolerations for one NoExecute
// taint (v1.Toleration.ToleratesTaint, without the comparison operators
// these taints never need) and getMinTolerationTime over them: the shortest
// tolerationSeconds (<= 0 meaning 0) of the matching tolerations; forever
// when every match has none; tolerated=false when none matches.
func tolerationFor(pod *corev1.Pod, key, value string) (d time.Duration, tolerated, forever bool) {
	minSeconds := int64(math.MaxInt64)
	for i := range pod.Spec.Tolerations {
		t := &pod.Spec.Tolerations[i]
		if !toleratesNoExecute(t, key, value) {
			continue
		}
		tolerated = true
		if t.TolerationSeconds == nil {
			continue
		}
		if *t.TolerationSeconds <= 0 {
			return 0, true, false
		}
		minSeconds = min(minSeconds, *t.TolerationSeconds)
	}
	switch {
	case !tolerated:
		return 0, false, false
	case minSeconds == math.MaxInt64:
		return 0, true, true
	case minSeconds > int64(math.MaxInt64/time.Second):
		// Beyond time.Duration: as good as forever.
		return 0, true, true
	default:
		return time.Duration(minSeconds) * time.Second, true, false
	}
}

// toleratesNoExecute is v1.Toleration.ToleratesTaint for a NoExecute taint
// of this key and value: an empty effect matches every effect, an empty key
// (with Exists) every key.
func toleratesNoExecute(t *corev1.Toleration, key, value string) bool {
	if t.Effect != "" && t.Effect != corev1.TaintEffectNoExecute {
		return false
	}
	if t.Key != "" && t.Key != key {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return t.Value == value
	default:
		return false
	}
}

// formatTime renders a time for reasons: UTC, to the second, stable.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}
