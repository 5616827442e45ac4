package controller

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

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
	// global opt-out (Disabled).
	Config peering.Config
	// NodeSelector limits the nodes the controller plans for and labels;
	// nil means every node. Nodes it does not select are left alone.
	NodeSelector labels.Selector
	// SessionReportMaxAge drops agents' reports older than this (a dead
	// node's last report must not keep it in the set); 0 means
	// peering.DefaultSessionReportMaxAge.
	SessionReportMaxAge time.Duration
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
}

func (o PeeringOptions) withDefaults() PeeringOptions {
	if o.Name == "" {
		o.Name = DefaultPeeringName
	}
	if o.NodeSelector == nil {
		o.NodeSelector = labels.Everything()
	}
	if o.SessionReportMaxAge == 0 {
		o.SessionReportMaxAge = peering.DefaultSessionReportMaxAge
	}
	if o.State.Name == "" {
		o.State.Name = DefaultPeeringStateName
	}
	if o.State.Namespace == "" {
		o.State.Namespace = DefaultPeeringNamespace
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
	if o.SessionReportMaxAge < 0 {
		errs = append(errs, fmt.Errorf("peering: sessionReportMaxAge %v must not be negative", o.SessionReportMaxAge))
	}
	if o.Calico != nil {
		if err := o.Calico.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("peering: %w", err))
		}
	}
	return errors.Join(errs...)
}
