package cli

import (
	"errors"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// AddZoneFlags registers kube-controller-manager's node lifecycle flags
// that the zone model reads, bound to c. Every command that predicts
// upstream eviction (controller, diagnose, restore bringup) registers them
// here, so that a setting has one name and one default everywhere: c's
// values, or upstream's defaults when c is the zero Config.
func AddZoneFlags(f *pflag.FlagSet, c *zone.Config) {
	*c = c.WithDefaults()
	f.Float64Var(&c.UnhealthyZoneThreshold, "unhealthy-zone-threshold", c.UnhealthyZoneThreshold, "kube-controller-manager's --unhealthy-zone-threshold")
	f.Int32Var(&c.LargeClusterSizeThreshold, "large-cluster-size-threshold", c.LargeClusterSizeThreshold, "kube-controller-manager's --large-cluster-size-threshold")
	f.Float64Var(&c.EvictionLimiterQPS, "node-eviction-rate", c.EvictionLimiterQPS, "kube-controller-manager's --node-eviction-rate")
	f.Float64Var(&c.SecondaryEvictionLimiterQPS, "secondary-node-eviction-rate", c.SecondaryEvictionLimiterQPS, "kube-controller-manager's --secondary-node-eviction-rate")
	f.DurationVar(&c.NodeMonitorGracePeriod, "node-monitor-grace-period", c.NodeMonitorGracePeriod, "kube-controller-manager's --node-monitor-grace-period: after a stall of every node (or every Lease) ends, a node not back yet is judged only this long after the end, as upstream resets its nodes' probe times")
}

// AddReplacementTimeoutFlag registers --replacement-timeout, bound to d:
// the controller acts with it, restore bringup too, and diagnose explains
// with it.
func AddReplacementTimeoutFlag(f *pflag.FlagSet, d *rescue.Defaults) {
	*d = d.WithDefaults()
	f.DurationVar(&d.ReplacementTimeout, "replacement-timeout", d.ReplacementTimeout, "how long a deleted pod may wait for its replacement before rebound scale-bounces its Deployment (scales it to 0 and back)")
}

// deprecatedAlias is a flag's former name: hidden, still working, and
// warning on use with the name to use instead.
type deprecatedAlias struct{ old, current string }

// peeringAliases are the names diagnose used before the peering settings
// took the controller's names.
var peeringAliases = []deprecatedAlias{
	{old: "prune-grace-period", current: "peering-prune-grace-period"},
	{old: "session-report-max-age", current: "peering-report-max-age"},
}

// AddPeeringFlags registers the peering planner's settings, bound to c:
// the controller plans with them and diagnose explains with them, so both
// take the same names. Zero fields of c show the planner's defaults,
// except --peering-max-prune-grace-period, whose default follows the
// prune grace period.
func AddPeeringFlags(f *pflag.FlagSet, c *peering.Config) {
	d := c.WithDefaults()
	c.PruneGracePeriod, c.FlapWindow, c.MaxLeaveShare = d.PruneGracePeriod, d.FlapWindow, d.MaxLeaveShare
	c.Evidence.ReportMaxAge, c.Evidence.MaxClockSkew = d.Evidence.ReportMaxAge, d.Evidence.MaxClockSkew
	// The fields the deprecated aliases set too.
	durations := map[string]*time.Duration{
		"peering-prune-grace-period": &c.PruneGracePeriod,
		"peering-report-max-age":     &c.Evidence.ReportMaxAge,
	}
	f.DurationVar(&c.PruneGracePeriod, "peering-prune-grace-period", c.PruneGracePeriod, "how long a node must be NotReady, with no Established session, before it leaves the BGP peer set")
	f.DurationVar(&c.FlapWindow, "peering-flap-window", c.FlapWindow, "how long a removal from the peer set counts for flap damping")
	f.DurationVar(&c.MaxPruneGracePeriod, "peering-max-prune-grace-period", c.MaxPruneGracePeriod, "cap of the prune grace period stretched by flap damping (0: "+peering.DefaultMaxPruneGracePeriod.String()+", or the prune grace period if longer)")
	f.DurationVar(&c.Evidence.ReportMaxAge, "peering-report-max-age", c.Evidence.ReportMaxAge, "ignore agents' PeeringReports (BGP sessions, gossip) older than this")
	f.DurationVar(&c.Evidence.MaxClockSkew, "peering-max-clock-skew", c.Evidence.MaxClockSkew, "ignore agents' PeeringReports (and session times) further in the future than this")
	f.Float64Var(&c.MaxLeaveShare, "peering-max-leave-share", c.MaxLeaveShare, "freeze the peer set when more than this share of its members would leave at once without a quorum confirming them dead, and let no more than this share of the set an incident began with be out at once (1 disables)")
	for _, a := range peeringAliases {
		p := durations[a.current]
		f.DurationVar(p, a.old, *p, "deprecated: use --"+a.current)
		// MarkDeprecated hides the flag from --help and prints the
		// warning when it is used; the value still lands in the field.
		if err := f.MarkDeprecated(a.old, "use --"+a.current+" instead"); err != nil {
			panic(err) // the flag was registered just above
		}
	}
}

// AddGossipWatchersFlag registers --gossip-watchers, bound to k: how many
// agents watch each member of the gossip ring and may vote on its death.
// The agents gossip with it and the controller judges with it, and the two
// must agree (each agent writes its own in its gossip read; the controller
// names every agent that differs), so both commands register it here: one
// name, one default, one rule (ValidateGossipWatchers).
func AddGossipWatchersFlag(f *pflag.FlagSet, k *int) {
	if *k == 0 {
		*k = liveness.DefaultWatchers
	}
	f.IntVar(k, "gossip-watchers", *k, "how many agents watch each member of the gossip ring, and so may vote on its death, 2.."+strconv.Itoa(liveness.MaxWatchers)+
		": the same on the controller and on every agent (chart value gossip.watchers sets both)")
}

// ValidateGossipWatchers checks --gossip-watchers at start.
func ValidateGossipWatchers(k int) error {
	return liveness.CheckWatchers("--gossip-watchers", k)
}

// AddDetectionFlags registers the settings of the Lease and gossip planes
// (docs/detection.md), bound to o: --gossip-watchers, --lease-margin,
// --gossip-distrust-window and --gossip-distrust-share.
// The controller judges with them and diagnose explains with them. o's
// zero fields show the defaults.
func AddDetectionFlags(f *pflag.FlagSet, o *liveness.Options) {
	d := o.WithDefaults()
	o.LeaseMargin = d.LeaseMargin
	AddGossipWatchersFlag(f, &o.Watchers)
	f.DurationVar(&o.LeaseMargin, "lease-margin", o.LeaseMargin, "with --lease-plane: how long past its renew interval (a quarter of its duration) a node's Lease may go unrenewed, on rebound's clock, before it counts as stale, "+
		liveness.MinLeaseMargin.String()+".."+liveness.MaxLeaseMargin.String()+"; lower it to find dead nodes sooner, at the price of taking a late renewal for a stale Lease")
	o.GossipDistrustWindow, o.GossipDistrustShare = d.GossipDistrustWindow, d.GossipDistrustShare
	f.DurationVar(&o.GossipDistrustWindow, "gossip-distrust-window", o.GossipDistrustWindow, "with --lease-plane: how long a node whose gossip watchers said Dead while its Lease renewed is not judged early by its gossip plane, and how long the controller holds all early judgement after it starts (it has no such history yet), "+
		liveness.MinGossipDistrustWindow.String()+".."+liveness.MaxGossipDistrustWindow.String())
	f.Float64Var(&o.GossipDistrustShare, "gossip-distrust-share", o.GossipDistrustShare, "with --lease-plane: the share of Ready nodes (at least one node) whose gossip plane may be distrusted at once before early judgement stops cluster-wide, "+
		strconv.FormatFloat(liveness.MinGossipDistrustShare, 'g', -1, 64)+".."+strconv.FormatFloat(liveness.MaxGossipDistrustShare, 'g', -1, 64))
}

// ValidateDetection checks the flags AddDetectionFlags registers, each
// named, before the command connects anywhere.
func ValidateDetection(o liveness.Options) error {
	return errors.Join(ValidateGossipWatchers(o.Watchers), liveness.CheckLeaseMargin("--lease-margin", o.LeaseMargin),
		liveness.CheckGossipDistrustWindow("--gossip-distrust-window", o.GossipDistrustWindow),
		liveness.CheckGossipDistrustShare("--gossip-distrust-share", o.GossipDistrustShare))
}
