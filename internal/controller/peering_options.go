package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

// Defaults of PeeringOptions.
const (
	// DefaultPeeringName names the controller, its Events' reporter and
	// its log lines.
	DefaultPeeringName = "peering"
	// DefaultPeeringStateName is the ConfigMap that carries the planner's
	// state (membership and flap history) across controller restarts.
	DefaultPeeringStateName = "rebound-peering"
	// DefaultPeeringNamespace holds it.
	DefaultPeeringNamespace = "rebound-system"
)

// PeeringOptions configure the peering controller.
type PeeringOptions struct {
	// Name of the controller; "" means DefaultPeeringName. Two peering
	// controllers in one manager need different names.
	Name string
	// Config is the planner's: prune grace period, flap damping, the
	// freeze share, which reports count, the global opt-out (Disabled).
	Config peering.Config
	// NodeSelector limits the nodes the controller plans for and labels;
	// nil means every node. Nodes it does not select are left alone.
	NodeSelector labels.Selector
	// StopSwitch is the ConfigMap whose existence stops every peering
	// change (the recovery controller's switch); empty means none.
	StopSwitch types.NamespacedName
	// PeerSet is the ConfigMap the set is published in; the zero value
	// means rebound-system/rebound-peer-set.
	PeerSet types.NamespacedName
	// State is the ConfigMap that carries the planner's state; the zero
	// value means rebound-system/rebound-peering. Its namespace must exist.
	State types.NamespacedName
	// Calico, when set, also publishes the Calico BGPPeer that meshes the
	// nodes of the set (pkg/peering/calico). Without it the set is only
	// the node label, which the agents read.
	Calico *calico.PeerOptions
	// DryRun plans, logs and records the state, but changes no label and
	// no Calico object.
	DryRun bool
	// Clock is injected for tests; nil means the real clock.
	Clock clock.PassiveClock
	// Tracker holds rebound's own first sight of each node's Ready state,
	// shared with the recovery controller; nil means one of its own.
	Tracker *liveness.Tracker
	// Leases is the Lease plane (controller --lease-plane), shared with
	// the recovery controller; nil means none. Without it the gossip
	// plane confirms no death for the freeze rule: a gossip quorum alone
	// is one plane.
	Leases *liveness.LeaseTracker
	// Distrust is the history of the planes' disagreements, which the
	// recovery controller's verdicts feed (Judge); nil means
	// none kept: only what disagrees now holds.
	Distrust *liveness.DistrustTracker
	// Liveness is the one judge the recovery and unreachable reconcilers
	// read too (Judge.Assess over the same trackers): when set, the
	// planner reads its verdicts and judges nothing itself. Nil: the
	// planner judges its own input (tests).
	Liveness func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment
}

func (o PeeringOptions) withDefaults() PeeringOptions {
	if o.Name == "" {
		o.Name = DefaultPeeringName
	}
	if o.NodeSelector == nil {
		o.NodeSelector = labels.Everything()
	}
	if o.Tracker == nil {
		o.Tracker = &liveness.Tracker{}
	}
	if o.State.Name == "" {
		o.State.Name = DefaultPeeringStateName
	}
	if o.State.Namespace == "" {
		o.State.Namespace = DefaultPeeringNamespace
	}
	if o.PeerSet.Name == "" {
		o.PeerSet.Name = peering.DefaultPeerSetName
	}
	if o.PeerSet.Namespace == "" {
		o.PeerSet.Namespace = o.State.Namespace
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Validate names every bad field.
func (o PeeringOptions) Validate() error {
	var errs []error
	if err := o.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Calico != nil {
		if err := o.Calico.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("peering: %w", err))
		}
	}
	return errors.Join(errs...)
}
