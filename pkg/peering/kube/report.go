package kube

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
)

// ReportFromAPI reads a PeeringReport object strictly (peering.Report's
// Validate): a report that fails is ignored by the controller, with the
// error logged, rather than half-read.
func ReportFromAPI(obj *v1alpha1.PeeringReport) (peering.Report, error) {
	r := peering.Report{
		Reporter:      obj.Name,
		ObservedAt:    obj.Report.ObservedAt.Time,
		SetGeneration: obj.Report.SetGeneration,
		Error:         obj.Report.BirdError,
		Recovering:    obj.Report.BirdRecovering,
		ListenPort:    uint16(obj.Report.ListenPort),
		Established:   int(obj.Report.Established),
	}
	for _, p := range obj.Report.Peers {
		s := peering.Session{Peer: p.Node, State: p.State, BFD: p.BFD}
		if p.Since != nil {
			s.Since = p.Since.Time
		}
		r.Sessions = append(r.Sessions, s)
	}
	if g := obj.Gossip; g != nil {
		r.Gossip = &liveness.GossipReport{ObservedAt: g.ObservedAt.Time, Members: int(g.Members), Watchers: int(g.Watchers)}
		for _, w := range g.Watches {
			lw := liveness.Watch{Node: w.Node, State: w.State}
			if w.Since != nil {
				lw.Since = w.Since.Time
			}
			r.Gossip.Watches = append(r.Gossip.Watches, lw)
		}
	}
	if err := r.Validate(); err != nil {
		return peering.Report{}, fmt.Errorf("PeeringReport %s: %w", obj.Name, err)
	}
	return r, nil
}

// ReportToAPI is the object an agent writes for r. Times are kept to the
// second, what the API stores (metav1.Time), so that reading the object
// back gives the same report.
func ReportToAPI(r peering.Report) *v1alpha1.PeeringReport {
	obj := &v1alpha1.PeeringReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PeeringReport"},
		ObjectMeta: metav1.ObjectMeta{Name: r.Reporter, Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound-agent"}},
		Report: v1alpha1.PeeringReportData{
			ObservedAt:     metav1.NewTime(r.ObservedAt.Truncate(time.Second)),
			SetGeneration:  r.SetGeneration,
			BirdError:      r.Error,
			BirdRecovering: r.Recovering,
			ListenPort:     int32(r.ListenPort),
			Established:    int32(r.Established),
		},
	}
	for _, s := range r.Sessions {
		p := v1alpha1.PeerSession{Node: s.Peer, State: s.State, BFD: s.BFD}
		if !s.Since.IsZero() {
			t := metav1.NewTime(s.Since.Truncate(time.Second))
			p.Since = &t
		}
		obj.Report.Peers = append(obj.Report.Peers, p)
	}
	return obj
}

// GossipToAPI is the object an agent's gossip writer applies for its read
// g: only the gossip field, under its own field manager, so that it never
// touches what the BGP writer owns. Times are kept to the second.
func GossipToAPI(reporter string, g liveness.GossipReport) *v1alpha1.PeeringReport {
	obj := &v1alpha1.PeeringReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PeeringReport"},
		ObjectMeta: metav1.ObjectMeta{Name: reporter, Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound-agent"}},
		Gossip:     &v1alpha1.GossipReport{ObservedAt: metav1.NewTime(g.ObservedAt.Truncate(time.Second)), Members: int32(g.Members), Watchers: int32(g.Watchers)},
	}
	for _, w := range g.Watches {
		aw := v1alpha1.GossipWatch{Node: w.Node, State: w.State}
		if !w.Since.IsZero() {
			t := metav1.NewTime(w.Since.Truncate(time.Second))
			aw.Since = &t
		}
		obj.Gossip.Watches = append(obj.Gossip.Watches, aw)
	}
	return obj
}

// PeerSetFromConfigMap reads the published set from its ConfigMap.
func PeerSetFromConfigMap(cm *corev1.ConfigMap) (peering.PeerSet, error) {
	data, ok := cm.Data[peering.PeerSetKey]
	if !ok {
		return peering.PeerSet{}, fmt.Errorf("ConfigMap %s/%s has no key %s: is it the one `rebound controller --peering` publishes?", cm.Namespace, cm.Name, peering.PeerSetKey)
	}
	s, err := peering.ParsePeerSet(data)
	if err != nil {
		return peering.PeerSet{}, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return s, nil
}

// Assess is liveness.Assess over API objects: the one verdict per node
// that the recovery planner (rescue.Snapshot.Verdicts) and diagnose read.
// Reports that cannot be read are left out. firstSeen is the caller's
// liveness.Tracker, nil for a one-shot CLI.
func Assess(nodes []*corev1.Node, reports []v1alpha1.PeeringReport, firstSeen map[string]time.Time, leases map[string]liveness.Lease, now time.Time, opts liveness.Options) liveness.Assessment {
	return AssessReports(nodes, ReadableReports(reports), firstSeen, leases, now, opts)
}

// ReadableReports are the reports ReportFromAPI reads; the others are
// left out.
func ReadableReports(reports []v1alpha1.PeeringReport) []peering.Report {
	rs := make([]peering.Report, 0, len(reports))
	for i := range reports {
		if r, err := ReportFromAPI(&reports[i]); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// AssessReports is Assess over reports already read (diagnose reads them
// through the dynamic client). leases is the Lease plane (nil: none).
func AssessReports(nodes []*corev1.Node, reports []peering.Report, firstSeen map[string]time.Time, leases map[string]liveness.Lease, now time.Time, opts liveness.Options) liveness.Assessment {
	return liveness.Assess(liveness.Input{Nodes: LivenessNodes(nodes), Reports: reports, FirstSeen: firstSeen, Leases: leases, Options: opts}, now)
}

// LeaseRenewal reads what the Lease plane compares of a node's Lease: its
// renew time as written (the kubelet's clock: a change of it is a
// renewal, it is never used as a time by the controller) and its
// duration; zero for fields not set.
func LeaseRenewal(l *coordinationv1.Lease) (renew time.Time, duration time.Duration) {
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return renew, duration
}

// LeasesAsWritten is the Lease plane of a one-shot reader (diagnose),
// which has no observation history: each renewal is taken at the time the
// kubelet wrote, and the verdicts say their clocks are the API's.
func LeasesAsWritten(leases []coordinationv1.Lease) map[string]liveness.Lease {
	out := make(map[string]liveness.Lease, len(leases))
	for i := range leases {
		renew, d := LeaseRenewal(&leases[i])
		if !renew.IsZero() && d > 0 {
			out[leases[i].Name] = liveness.Lease{RenewSeen: renew, RenewInterval: liveness.RenewInterval(d)}
		}
	}
	return out
}

// LeaseRenewTimes maps each Lease's node to its renewTime as written (the
// kubelet's clock): what a rescue a two-plane verdict decided carries for
// the executor to compare (rescue.Snapshot.LeaseRenewTimes).
func LeaseRenewTimes(leases []coordinationv1.Lease) map[string]time.Time {
	out := make(map[string]time.Time, len(leases))
	for i := range leases {
		renew, _ := LeaseRenewal(&leases[i])
		out[leases[i].Name] = renew
	}
	return out
}

// LivenessNodes reads what the liveness model needs of each Node.
func LivenessNodes(nodes []*corev1.Node) []liveness.Node {
	out := make([]liveness.Node, 0, len(nodes))
	for _, n := range nodes {
		if n == nil {
			continue
		}
		ready, since := Ready(n)
		out = append(out, liveness.Node{Name: n.Name, Ready: ready, Transition: since})
	}
	return out
}
