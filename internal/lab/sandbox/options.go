package sandbox

import (
	"fmt"
	"io"
	"time"

	"rebound/pkg/zone"
)

// Timings are the knobs that decide how fast the control plane notices a
// dead node and evicts its pods.
type Timings struct {
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period: how long a node's Lease may go
	// unrenewed before the node is marked NotReady (Unknown).
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod is --node-monitor-period: how often the node
	// lifecycle controller checks nodes and recomputes zone states.
	NodeMonitorPeriod time.Duration
	// NodeLeaseDuration is the Lease duration kwok's fake kubelets use;
	// they renew at a quarter of it, like the kubelet. It must stay well
	// below NodeMonitorGracePeriod or healthy nodes flap.
	NodeLeaseDuration time.Duration
	// DefaultTolerationSeconds are the apiserver's
	// --default-not-ready-toleration-seconds and
	// --default-unreachable-toleration-seconds: how long a pod without its
	// own toleration stays on a node tainted NoExecute.
	DefaultTolerationSeconds int64
}

// DefaultTimings are the upstream defaults of Kubernetes v1.37 (kubelet
// lease 40 s, grace 50 s, monitor period 5 s, tolerations 300 s). The demo
// uses them so that what it shows is what a real cluster does.
func DefaultTimings() Timings {
	return Timings{
		NodeMonitorGracePeriod:   50 * time.Second,
		NodeMonitorPeriod:        5 * time.Second,
		NodeLeaseDuration:        40 * time.Second,
		DefaultTolerationSeconds: 300,
	}
}

// FastTimings shrink every period about fivefold so that scenario tests take
// minutes. The ratios between them stay those of the defaults.
func FastTimings() Timings {
	return Timings{
		NodeMonitorGracePeriod:   12 * time.Second,
		NodeMonitorPeriod:        1 * time.Second,
		NodeLeaseDuration:        8 * time.Second,
		DefaultTolerationSeconds: 20,
	}
}

// Validate rejects timings the control plane would misbehave with.
func (t Timings) Validate() error {
	switch {
	case t.NodeMonitorPeriod <= 0:
		return fmt.Errorf("timings: node monitor period must be positive (kube-controller-manager --node-monitor-period), got %s", t.NodeMonitorPeriod)
	case t.NodeLeaseDuration < 4*time.Second:
		return fmt.Errorf("timings: node lease duration must be at least 4s (kwok renews at a quarter of it), got %s", t.NodeLeaseDuration)
	case t.NodeMonitorGracePeriod <= t.NodeLeaseDuration/4+t.NodeMonitorPeriod:
		return fmt.Errorf("timings: node monitor grace period %s must exceed a lease renewal (%s) plus a monitor period (%s), or healthy nodes go NotReady", t.NodeMonitorGracePeriod, t.NodeLeaseDuration/4, t.NodeMonitorPeriod)
	case t.DefaultTolerationSeconds < 0:
		return fmt.Errorf("timings: default toleration seconds must not be negative, got %d", t.DefaultTolerationSeconds)
	}
	return nil
}

// Options describe one sandbox.
type Options struct {
	// Dir holds certificates, etcd data, kubeconfigs, logs and the state
	// file. It is created if missing.
	Dir string
	// Binaries to run; see EnsureBinaries.
	Binaries Binaries
	// Nodes is the number of fake nodes, named node-0 … node-N-1.
	Nodes int
	// Region and Zone label every node (topology.kubernetes.io/*), so that
	// they all fall in one zone of the node lifecycle controller.
	Region, Zone string
	// Zones spreads the nodes over that many zones (zone-a, zone-b, …)
	// instead of the one Zone; ZoneSizes, if set, gives each zone's node
	// count (summing to Nodes), e.g. a small zone that can be driven into
	// PartialDisruption beside large healthy ones. See zones.go.
	Zones     int
	ZoneSizes []int
	Timings   Timings
	// Detached processes outlive this process (`rebound sandbox up`);
	// attached ones die with it (tests, the demo).
	Detached bool
	// Progress receives one line per start-up step; nil discards it.
	Progress io.Writer
	// ExtraArgs are appended to a component's flags, by component name
	// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok).
	ExtraArgs map[string][]string

	// restore is set by Cluster.Restore: start on the restored etcd data
	// dir with the existing certificates, and only its alive nodes
	// heartbeating (see restore.go).
	restore *restoreSpec
}

func (o *Options) setDefaults() {
	if o.Nodes == 0 {
		o.Nodes = 5
	}
	if o.Region == "" {
		o.Region = "sandbox"
	}
	if o.Zone == "" {
		o.Zone = "zone-a"
	}
	if o.Timings == (Timings{}) {
		o.Timings = DefaultTimings()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

func (o *Options) validate() error {
	if o.Dir == "" {
		return fmt.Errorf("sandbox: Dir is required")
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("sandbox: nodes must be between 1 and %d, got %d", MaxNodes, o.Nodes)
	}
	if err := o.validateZones(); err != nil {
		return err
	}
	if m := o.Binaries.missing(); len(m) > 0 {
		return fmt.Errorf("sandbox: binaries missing in %q: %v (run `rebound sandbox build`)", o.Binaries.Dir, m)
	}
	return o.Timings.Validate()
}

// ReboundFlags are the flags that tell a rebound controller the
// kube-controller-manager settings this sandbox runs with, under the same
// names (cli.AddZoneFlags): every lab controller, in the tests, the bench
// and the demo, starts with them, as an operator sets them from the
// cluster's own.
//
// Besides, a distrust window of GossipDistrustWindow: a controller holds
// early judgement for one window after it starts (it knows no history of
// the planes' disagreements), and a scenario waits that long, not the
// default 3 minutes, before a death it times (scenario.WaitEarlyJudgement).
func (t Timings) ReboundFlags() []string {
	return []string{"--node-monitor-grace-period=" + t.NodeMonitorGracePeriod.String(),
		"--gossip-distrust-window=" + GossipDistrustWindow.String()}
}

// GossipDistrustWindow is the lab controllers' --gossip-distrust-window:
// long enough to cover a stalled Lease's detection (a renew interval and
// the margin, 4 s with FastTimings), short enough that a scenario's wait
// after the controller starts costs little.
const GossipDistrustWindow = 15 * time.Second

// ZoneConfig is kube-controller-manager's node lifecycle settings as this
// sandbox runs them (upstream's defaults and its node grace period), for a
// rebound controller or restore bringup in the same process.
func (t Timings) ZoneConfig() zone.Config {
	cfg := zone.DefaultConfig()
	cfg.NodeMonitorGracePeriod = t.NodeMonitorGracePeriod
	return cfg
}
