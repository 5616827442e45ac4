package rescue

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/zone"
)

// Sources are what a Snapshot is built from: the objects as the caller
// read them (the controller from its caches, restore bringup and diagnose
// with one List each), the liveness signals, and the caller's settings and
// history. Build is the one place they become a Snapshot, so that the
// controller, restore bringup and diagnose plan from the same fields
// filled the same way.
type Sources struct {
	Now        time.Time
	Nodes      []*corev1.Node
	Pods       []*corev1.Pod
	Namespaces map[string]map[string]string
	PVCs       []*corev1.PersistentVolumeClaim
	// ReplicaSets and Deployments: the owners of the stateless pods.
	ReplicaSets []*appsv1.ReplicaSet
	Deployments []*appsv1.Deployment
	Policies    []*v1alpha1.RecoveryPolicy
	// Liveness are the signals besides the nodes' Ready conditions.
	Liveness LivenessSignals

	ZoneConfig         zone.Config
	Defaults           Defaults
	PreviousZones      zone.Cluster
	PreviousDisruption Disruption
}

// LivenessSignals are what pkg/liveness judges a node by besides its Ready
// condition (which Sources.Nodes carry): the agents' PeeringReports
// (sessions and gossip votes) and the nodes' Leases.
type LivenessSignals struct {
	// Reports are the agents' PeeringReports as read and decoded
	// (pkg/peering/kube.ReportFromAPI); nil when none could be read.
	Reports []liveness.Report
	// Leases is the Lease plane: each node's Lease renewal as the caller
	// saw it, on its own clock (a liveness.LeaseTracker's) or, for a
	// one-shot reader, at the time the kubelet wrote it
	// (kube.LeasesAsWritten). nil: no Lease plane.
	Leases map[string]liveness.Lease
	// LeaseRenewTimes is each Lease's spec.renewTime as written, read
	// before the verdicts (Snapshot.LeaseRenewTimes); nil: no action a
	// two-plane verdict decides.
	LeaseRenewTimes map[string]time.Time
	// FirstSeen is the caller's liveness.Tracker's first sight of each
	// node's Ready state; nil for a one-shot reader (the API's times).
	FirstSeen map[string]time.Time
	// Options say which reports count (peering.Config.Evidence).
	Options liveness.Options
	// Assess, when set, judges in place of liveness.Assess over the
	// fields above: the controller's judge (internal/controller.Judge), which reads
	// the same reports and Leases from its caches, shares its first-sight
	// history with the peering and unreachable reconcilers and records the
	// verdict metrics. Reports, Leases and FirstSeen are then unused.
	Assess func(nodes []*corev1.Node, now time.Time) liveness.Assessment
}

// Judge returns the liveness verdict of every node of nodes from the
// signals: the one model (pkg/liveness) every planner reads.
func (l LivenessSignals) Judge(nodes []*corev1.Node, now time.Time) liveness.Assessment {
	if l.Assess != nil {
		return l.Assess(nodes, now)
	}
	return kube.AssessReports(nodes, l.Reports, l.FirstSeen, l.Leases, now, l.Options)
}

// Build assembles the planner's input from src: the objects, the zone
// config and defaults (WithDefaults), and every liveness input (Verdicts
// judged from the nodes, the reports and the Leases; LeaseRenewTimes).
// It returns the assessment too, whose StaleAt says when the verdicts
// may change with no new event. A caller that reads pods only after it
// knows the verdicts (the controller: only the pods of the nodes an
// incident touches) appends them to the Snapshot's Pods.
func Build(src Sources) (Snapshot, liveness.Assessment) {
	namespaces := src.Namespaces
	if namespaces == nil {
		namespaces = map[string]map[string]string{}
	}
	a := src.Liveness.Judge(src.Nodes, src.Now)
	return Snapshot{
		Now:                src.Now,
		Nodes:              src.Nodes,
		Pods:               src.Pods,
		Namespaces:         namespaces,
		ReplicaSets:        src.ReplicaSets,
		Deployments:        src.Deployments,
		PVCs:               src.PVCs,
		Policies:           src.Policies,
		ZoneConfig:         src.ZoneConfig.WithDefaults(),
		Defaults:           src.Defaults.WithDefaults(),
		PreviousZones:      src.PreviousZones,
		PreviousDisruption: src.PreviousDisruption,
		Verdicts:           a.Nodes,
		LeaseRenewTimes:    src.Liveness.LeaseRenewTimes,
	}, a
}
