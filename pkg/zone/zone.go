// Package zone is a pure model of the zone-state rules of
// kube-controller-manager's node lifecycle controller (Kubernetes v1.37,
// k8s.io/kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go).
//
// It answers, from a snapshot of nodes, the questions the controller itself
// only logs: which disruption state each zone is in, and at which rate the
// controller adds NoExecute taints (node.kubernetes.io/not-ready and
// node.kubernetes.io/unreachable) to NotReady nodes of that zone. Pods without
// a matching toleration are evicted by the taint-eviction controller once a
// node carries such a taint; a rate of 0 means NotReady nodes are never
// tainted, so their pods are never evicted.
//
// The package imports only the standard library: it has no client, no
// logger, no clock. Callers convert their Node objects with NodeFromLabels.
//
// Every rule names the upstream function it mirrors. Where upstream behaviour
// depends on Go map iteration order, the model picks the steady state and says
// so in a comment.
package zone

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Node labels read by the upstream controller.
const (
	// LabelTopologyZone and LabelTopologyRegion are the GA topology labels
	// (k8s.io/api/core/v1 well_known_labels.go).
	LabelTopologyZone   = "topology.kubernetes.io/zone"
	LabelTopologyRegion = "topology.kubernetes.io/region"
	// LabelFailureDomainBetaZone and LabelFailureDomainBetaRegion are the
	// deprecated beta labels. GetZoneKey reads them FIRST: a node that carries
	// a beta label uses its value even when the GA label says otherwise.
	LabelFailureDomainBetaZone   = "failure-domain.beta.kubernetes.io/zone"
	LabelFailureDomainBetaRegion = "failure-domain.beta.kubernetes.io/region"
	// LabelExcludeDisruption leaves a node out of zone-state counting
	// (upstream labelNodeDisruptionExclusion). Only the key's presence
	// matters: "node.kubernetes.io/exclude-disruption=false" excludes too.
	LabelExcludeDisruption = "node.kubernetes.io/exclude-disruption"
)

// zoneKeySeparator is what upstream GetZoneKey puts between region and zone.
const zoneKeySeparator = ":\x00:"

// NodeInfo is what the zone rules need to know about one node.
type NodeInfo struct {
	// Name is the node's name. The zone rules do not read it; it is carried
	// for callers and error messages.
	Name string
	// Zone is the zone key, as returned by ZoneKey or ZoneKeyFromLabels.
	// Nodes without zone labels share the zone "".
	Zone string
	// Ready is true when the node's Ready condition is True as the node
	// lifecycle controller sees it: after tryUpdateNodeHealth has turned a
	// node whose kubelet stopped posting status (and renewing its Lease) for
	// --node-monitor-grace-period into Ready=Unknown. Ready False, Unknown,
	// and a missing Ready condition all count as not ready.
	Ready bool
	// ExcludedFromDisruption is true when the node carries the
	// node.kubernetes.io/exclude-disruption label (any value).
	ExcludedFromDisruption bool
}

// NodeFromLabels builds a NodeInfo from a node's name, labels and Ready
// condition, the way monitorNodeHealth reads a v1.Node: the zone key from
// GetZoneKey and the exclusion from isNodeExcludedFromDisruptionChecks.
// Control-plane role labels have no effect: upstream counts control-plane
// nodes like any other node.
func NodeFromLabels(name string, labels map[string]string, ready bool) NodeInfo {
	return NodeInfo{
		Name:                   name,
		Zone:                   ZoneKeyFromLabels(labels),
		Ready:                  ready,
		ExcludedFromDisruption: IsExcludedFromDisruption(labels),
	}
}

// IsExcludedFromDisruption mirrors upstream isNodeExcludedFromDisruptionChecks:
// true when the exclude-disruption label key is present, whatever its value.
func IsExcludedFromDisruption(labels map[string]string) bool {
	_, ok := labels[LabelExcludeDisruption]
	return ok
}

// ZoneKeyFromLabels mirrors GetZoneKey in k8s.io/component-helpers
// node/topology/helpers.go, which the controller calls as
// nodetopology.GetZoneKey. The beta failure-domain label wins over the GA
// topology label whenever it is present, even with an empty value.
func ZoneKeyFromLabels(labels map[string]string) string {
	if labels == nil {
		return ""
	}
	zone, ok := labels[LabelFailureDomainBetaZone]
	if !ok {
		zone = labels[LabelTopologyZone]
	}
	region, ok := labels[LabelFailureDomainBetaRegion]
	if !ok {
		region = labels[LabelTopologyRegion]
	}
	return ZoneKey(region, zone)
}

// ZoneKey builds the zone key from region and zone label values exactly like
// upstream GetZoneKey: "" when both are empty, otherwise
// region + ":\x00:" + zone. The NUL byte keeps "a:b"/"c" and "a"/"b:c"
// apart; it does not show when printed, so use DisplayZone in messages.
func ZoneKey(region, zone string) string {
	if region == "" && zone == "" {
		return ""
	}
	return region + zoneKeySeparator + zone
}

// SplitZoneKey reverses ZoneKey. It returns ok=false for a key that ZoneKey
// did not build (the key "" gives "", "", true).
func SplitZoneKey(key string) (region, zone string, ok bool) {
	if key == "" {
		return "", "", true
	}
	region, zone, ok = strings.Cut(key, zoneKeySeparator)
	return region, zone, ok
}

// DisplayZone renders a zone key for humans: "region/zone", "(no zone)" for
// the empty key, and a quoted string for a key ZoneKey did not build.
func DisplayZone(key string) string {
	region, zone, ok := SplitZoneKey(key)
	switch {
	case key == "":
		return "(no zone)"
	case !ok:
		return fmt.Sprintf("%q", key)
	default:
		return region + "/" + zone
	}
}

// State is a zone's disruption state (upstream type ZoneState).
type State int

// The zone states, with upstream's names as their String().
const (
	// Initial is the state of a zone the controller has just seen
	// (addPodEvictorForNewZone) and of a zone with no counted node.
	Initial State = iota
	// Normal: fewer nodes are NotReady than PartialDisruption needs.
	Normal
	// PartialDisruption: more than 2 nodes and at least
	// --unhealthy-zone-threshold of the zone's nodes are NotReady.
	PartialDisruption
	// FullDisruption: no node of the zone is Ready.
	FullDisruption
)

// String returns upstream's name for the state.
func (s State) String() string {
	switch s {
	case Initial:
		return "Initial"
	case Normal:
		return "Normal"
	case PartialDisruption:
		return "PartialDisruption"
	case FullDisruption:
		return "FullDisruption"
	default:
		return fmt.Sprintf("State(%d)", int(s))
	}
}

// ComputeState mirrors upstream (*Controller).ComputeZoneState for the nodes
// of one zone (the caller groups by NodeInfo.Zone; the zone is not checked).
// It returns the state, the number of NotReady nodes and the number of nodes
// counted. Nodes with ExcludedFromDisruption are skipped, because
// monitorNodeHealth never passes them to ComputeZoneState.
//
// The rules, in upstream's order:
//   - no Ready node and at least one NotReady node: FullDisruption;
//   - more than 2 NotReady nodes and NotReady/total >= threshold:
//     PartialDisruption. The ratio and the threshold are compared as float32,
//     as upstream does (its threshold is a float32 flag);
//   - otherwise Normal.
//
// One deliberate difference: for a zone with no counted node upstream's
// function would return Normal, but upstream never calls it for such a zone
// (handleDisruption only sees zones with at least one counted node); the zone
// keeps the Initial state addPodEvictorForNewZone gave it. ComputeState
// returns Initial, which is the state the controller holds for that zone.
func ComputeState(nodes []NodeInfo, cfg Config) (state State, notReady, total int) {
	ready := 0
	for i := range nodes {
		if nodes[i].ExcludedFromDisruption {
			continue
		}
		if nodes[i].Ready {
			ready++
		} else {
			notReady++
		}
	}
	return computeState(ready, notReady, cfg.threshold32()), notReady, ready + notReady
}

// computeState is the switch of upstream ComputeZoneState on counts.
func computeState(ready, notReady int, threshold float32) State {
	switch {
	case ready == 0 && notReady == 0:
		return Initial
	case ready == 0 && notReady > 0:
		return FullDisruption
	case notReady > 2 && float32(notReady)/float32(notReady+ready) >= threshold:
		return PartialDisruption
	default:
		return Normal
	}
}

// stateReason explains why a zone with these counts is in state s.
func stateReason(s State, notReady, total, excluded int, threshold float64) string {
	var b strings.Builder
	switch s {
	case Initial:
		b.WriteString("no node counted in this zone")
	case FullDisruption:
		fmt.Fprintf(&b, "all %d counted nodes are NotReady", total)
	case PartialDisruption:
		fmt.Fprintf(&b, "%d of %d nodes NotReady: more than 2 and %.2f >= --unhealthy-zone-threshold %g",
			notReady, total, float64(notReady)/float64(total), threshold)
	case Normal:
		if notReady <= 2 {
			fmt.Fprintf(&b, "%d of %d nodes NotReady: PartialDisruption needs more than 2", notReady, total)
		} else {
			fmt.Fprintf(&b, "%d of %d nodes NotReady: %.2f < --unhealthy-zone-threshold %g",
				notReady, total, float64(notReady)/float64(total), threshold)
		}
	}
	if excluded > 0 {
		fmt.Fprintf(&b, " (%d node(s) with %s not counted)", excluded, LabelExcludeDisruption)
	}
	return b.String()
}

// Config holds the kube-controller-manager settings the zone rules read
// (cmd/kube-controller-manager/app/options/nodelifecyclecontroller.go). Set
// each field to the value the cluster's kube-controller-manager runs with;
// the model is only as right as these values.
type Config struct {
	// UnhealthyZoneThreshold is --unhealthy-zone-threshold (default 0.55):
	// the fraction of NotReady nodes (and more than 2) that puts a zone in
	// PartialDisruption. Values above 1 are accepted, as kube-controller-manager
	// accepts them: PartialDisruption is then never entered.
	UnhealthyZoneThreshold float64
	// LargeClusterSizeThreshold is --large-cluster-size-threshold (default
	// 50). Despite the name it is compared with the number of counted nodes
	// of the ZONE, not of the cluster: a PartialDisruption zone of more than
	// this many nodes is tainted at SecondaryEvictionLimiterQPS, a smaller
	// one not at all.
	LargeClusterSizeThreshold int32
	// EvictionLimiterQPS is --node-eviction-rate (default 0.1): NoExecute
	// taints per second per zone in Normal state, and in FullDisruption
	// while another zone is not fully disrupted.
	EvictionLimiterQPS float64
	// SecondaryEvictionLimiterQPS is --secondary-node-eviction-rate (default
	// 0.01): NoExecute taints per second in a PartialDisruption zone larger
	// than LargeClusterSizeThreshold.
	SecondaryEvictionLimiterQPS float64
	// NodeMonitorGracePeriod is --node-monitor-grace-period (default 50s):
	// how long a node may post no status before kube-controller-manager
	// marks it NotReady. When a full disruption ends, upstream resets every
	// node's probe timestamp, so a node not back yet gets this long again
	// before it is judged; rebound restarts its clocks the same way
	// (pkg/rescue). Zero means DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
}

// DefaultNodeMonitorGracePeriod is kube-controller-manager's default
// --node-monitor-grace-period (50s since Kubernetes 1.32).
const DefaultNodeMonitorGracePeriod = 50 * time.Second

// DefaultConfig returns kube-controller-manager's defaults.
func DefaultConfig() Config {
	return Config{
		UnhealthyZoneThreshold:      0.55,
		LargeClusterSizeThreshold:   50,
		EvictionLimiterQPS:          0.1,
		SecondaryEvictionLimiterQPS: 0.01,
		NodeMonitorGracePeriod:      DefaultNodeMonitorGracePeriod,
	}
}

// WithDefaults returns c, or kube-controller-manager's defaults when c is
// the zero Config. A zero Config would mean "never evict" and silently
// change every ETA, so every reader of a Config (the planner, diagnose,
// restore) treats zero as "not set" through this one function. A Config
// with some fields set is taken as it is: zero is a valid rate.
func (c Config) WithDefaults() Config {
	if c == (Config{}) {
		return DefaultConfig()
	}
	if c.NodeMonitorGracePeriod <= 0 {
		// A duration of zero is never kube-controller-manager's value
		// (it would mark every node NotReady at once).
		c.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	return c
}

// Validate reports every field the model cannot use, each error naming the
// kube-controller-manager flag, the Config field and the fix.
//
// kube-controller-manager itself validates none of these flags
// (NodeLifecycleControllerOptions.Validate returns no error), so Validate
// rejects only values that are surely mistakes: NaN, infinities, values that
// do not fit the float32 flags, and negative numbers. Zero is accepted
// everywhere: a zero rate stops tainting, a zero threshold makes any zone
// with more than 2 NotReady nodes PartialDisruption.
func (c Config) Validate() error {
	var errs []error
	if err := checkFloat("--unhealthy-zone-threshold", "UnhealthyZoneThreshold", c.UnhealthyZoneThreshold,
		"set it to the fraction kube-controller-manager runs with, e.g. 0.55 (its default), not a percentage"); err != nil {
		errs = append(errs, err)
	}
	if c.LargeClusterSizeThreshold < 0 {
		errs = append(errs, fmt.Errorf("--large-cluster-size-threshold (Config.LargeClusterSizeThreshold) is %d: must be >= 0; set it to kube-controller-manager's value, default 50",
			c.LargeClusterSizeThreshold))
	}
	if err := checkFloat("--node-eviction-rate", "EvictionLimiterQPS", c.EvictionLimiterQPS,
		"set it to kube-controller-manager's value in nodes per second, default 0.1"); err != nil {
		errs = append(errs, err)
	}
	if err := checkFloat("--secondary-node-eviction-rate", "SecondaryEvictionLimiterQPS", c.SecondaryEvictionLimiterQPS,
		"set it to kube-controller-manager's value in nodes per second, default 0.01"); err != nil {
		errs = append(errs, err)
	}
	if c.NodeMonitorGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("--node-monitor-grace-period (Config.NodeMonitorGracePeriod) is %s: must be >= 0 (0 means the default, %s); set it to kube-controller-manager's value",
			c.NodeMonitorGracePeriod, DefaultNodeMonitorGracePeriod))
	}
	return errors.Join(errs...)
}

// checkFloat rejects NaN, infinities, negatives and values beyond float32,
// the type of kube-controller-manager's flags.
func checkFloat(flag, field string, v float64, fix string) error {
	var problem string
	switch {
	case math.IsNaN(v):
		problem = "is NaN"
	case math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32:
		problem = fmt.Sprintf("is %g: does not fit kube-controller-manager's float32 flag", v)
	case v < 0:
		problem = fmt.Sprintf("is %g: must be >= 0", v)
	default:
		return nil
	}
	return fmt.Errorf("%s (Config.%s) %s; %s", flag, field, problem, fix)
}

// threshold32 is the threshold as upstream holds it: a float32.
func (c Config) threshold32() float32 {
	return float32(c.UnhealthyZoneThreshold)
}

// reducedQPS mirrors upstream (*Controller).ReducedQPSFunc, the
// enterPartialDisruptionFunc: the secondary rate for a zone of more than
// LargeClusterSizeThreshold counted nodes, else 0.
func (c Config) reducedQPS(zoneSize int) float64 {
	if int32(zoneSize) > c.LargeClusterSizeThreshold {
		return c.SecondaryEvictionLimiterQPS
	}
	return 0
}

// healthyQPS mirrors upstream (*Controller).HealthyQPSFunc, the
// enterFullDisruptionFunc: the normal rate whatever the zone size.
func (c Config) healthyQPS(int) float64 {
	return c.EvictionLimiterQPS
}
