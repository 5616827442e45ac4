// Package diagnose explains why a cluster is not recovering: the zone
// states kube-controller-manager computes and the eviction rate they put in
// force, the critical pods stranded on NotReady nodes and what rebound does
// about each, the BGP peers that hold a node's routes in graceful-restart
// recovery, and the workloads that are not Available with the first reason
// why.
//
// Explain is pure: it reads a rescue.Snapshot (the controller's own input)
// and a few more objects, calls rescue.PlanFor for every decision, and
// returns a Report ranked by impact. Gather fills the snapshot from the API
// with get and list only; Run does both and picks the exit code; NewCommand
// is the `rebound diagnose` (and `kubectl rebound diagnose`) command.
package diagnose

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// Extra is what Explain reads besides the controller's snapshot.
type Extra struct {
	// StatefulSets and DaemonSets, for the workloads that are not
	// Available (the snapshot already has Deployments and ReplicaSets).
	StatefulSets []*appsv1.StatefulSet
	DaemonSets   []*appsv1.DaemonSet
	// BuiltInPolicy says that the RecoveryPolicy CRD is not installed and
	// Snapshot.Policies holds the default policy deploy/ ships
	// (policyfile.Default) in its place.
	BuiltInPolicy bool
	// Warnings from gathering, reported as they are.
	Warnings []string
	// SessionReportMaxAge: agents' reports older than this are stale.
	// Zero means peering.DefaultReportMaxAge.
	SessionReportMaxAge time.Duration
	// Peering is the peering planner's configuration (prune grace
	// period), used to explain why a node is in or out of the peer set.
	Peering peering.Config
	// BGP are the BGP timers of the blackhole budget.
	BGP BGPSettings
	// PeeringReports are the agents' PeeringReports that could be read
	// (Gather warns about the others).
	PeeringReports []peering.Report
	// PeerSet is the published set document, nil when there is none.
	PeerSet *peering.PeerSet
	// Calico is what the document says about the Calico BGPPeer's API
	// group, nil when it says nothing (no Calico backend).
	Calico *BGPCalico
	// Leases is the Lease plane the verdicts were judged with
	// (kube.LeasesAsWritten); nil when the Leases could not be read.
	Leases map[string]liveness.Lease
	// DeleteRecords are the deletes rebound's Events record
	// (StrandedPodDeleted, StrandedPodForceDeleted); the policies'
	// status.lastActions are read from the snapshot.
	DeleteRecords []rescue.DeleteRecord
	// FencingReports are the agents' fencing blocks (PeeringReport
	// .fencing), by node; a node whose agent has none is absent.
	FencingReports map[string]*v1alpha1.FencingReport
	// FencingEvents are the fencing reconciler's Events about Nodes
	// (FencingTainted, FencingVerified, ...), as listed.
	FencingEvents []FencingEvent
	// FencingDocument is the published fencing document, nil when it
	// could not be read or is not published; FencingDocumentState says
	// which (see FencingDocumentState's values).
	FencingDocument      *fencing.Document
	FencingDocumentState string
}

// everyPodPolicy selects every pod. A second plan under it gives the
// planner's upstream-eviction answer for pods no real policy selects, so
// that diagnose never re-derives that rule.
func everyPodPolicy() *v1alpha1.RecoveryPolicy {
	p := &v1alpha1.RecoveryPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "diagnose-every-pod"},
		Spec: v1alpha1.RecoveryPolicySpec{
			Critical: v1alpha1.CriticalSelector{PodSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "diagnose.rebound.dev/never-set", Operator: metav1.LabelSelectorOpDoesNotExist}},
			}},
			DryRun: true,
		},
	}
	p.Spec.Default()
	return p
}

// explainer holds one Explain call's indexes.
type explainer struct {
	s     rescue.Snapshot
	x     Extra
	now   time.Time
	plan  rescue.Plan
	every map[podKey]*rescue.CriticalPod // every pod on a NotReady node, under everyPodPolicy
	nodes map[string]nodeInfo

	critical     map[podKey]int // index into report.CriticalPods
	deletions    map[podKey]rescue.Deletion
	covered      map[podKey]bool
	podsByOwner  map[types.UID][]*corev1.Pod
	rsDeployment map[types.UID]types.UID // ReplicaSet UID -> Deployment UID

	report   *Report
	findings []Finding
}

type podKey struct{ namespace, name string }

type nodeInfo struct {
	node  *corev1.Node
	ready bool
	since time.Time // Ready condition's last transition
	zone  string    // zone key
	// evictionTaint: the node carries unreachable or not-ready NoExecute.
	evictionTaint bool
}

// Explain explains the cluster in s. It is pure: it reads s and x only, and
// the same input gives the same Report.
func Explain(s rescue.Snapshot, x Extra) Report {
	s.ZoneConfig = s.ZoneConfig.WithDefaults()
	s.Defaults = s.Defaults.WithDefaults()
	if x.SessionReportMaxAge <= 0 {
		x.SessionReportMaxAge = peering.DefaultReportMaxAge
	}
	if x.Peering.Evidence.ReportMaxAge <= 0 {
		x.Peering.Evidence.ReportMaxAge = x.SessionReportMaxAge
	}
	x.Peering = x.Peering.WithDefaults()
	defaults := s.Defaults

	e := &explainer{s: s, x: x, now: s.Now}
	e.attributeDeletions()
	e.plan = rescue.PlanFor(e.s)
	e.index()
	r := &Report{
		SchemaVersion: SchemaVersion,
		Time:          s.Now.UTC(),
		ZoneConfig: ZoneConfig{
			UnhealthyZoneThreshold:         s.ZoneConfig.UnhealthyZoneThreshold,
			LargeClusterSizeThreshold:      s.ZoneConfig.LargeClusterSizeThreshold,
			NodeEvictionRate:               s.ZoneConfig.EvictionLimiterQPS,
			SecondaryNodeEvictionRate:      s.ZoneConfig.SecondaryEvictionLimiterQPS,
			ReplacementTimeoutSeconds:      defaults.ReplacementTimeout.Seconds(),
			SessionReportMaxAgeSeconds:     x.SessionReportMaxAge.Seconds(),
			PeeringPruneGracePeriodSeconds: x.Peering.PruneGracePeriod.Seconds(),
		},
		Findings:     []Finding{},
		Zones:        []Zone{},
		CriticalPods: []CriticalPod{},
		Workloads:    []Workload{},
		Liveness:     e.liveness(),
		Unreachable:  e.unreachable(),
		Fencing:      e.fencing(),
		Policies:     []Policy{},
		Warnings:     []string{},
	}
	e.report = r
	e.explainEarlyDetection()

	e.explainZones()
	e.explainCriticalPods()
	e.explainWorkloads()
	e.explainUncoveredCriticalPods()
	e.explainBGP()
	e.explainPolicies()

	r.Warnings = append(r.Warnings, x.Warnings...)
	r.Warnings = append(r.Warnings, e.plan.Warnings...)
	slices.Sort(r.Warnings)
	r.Warnings = slices.Compact(r.Warnings)

	slices.SortStableFunc(e.findings, compareFindings)
	r.Findings = e.findings
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	blocking, pending := 0, 0
	for _, f := range r.Findings {
		switch f.Impact {
		case ImpactBlocking:
			blocking++
		case ImpactPending:
			pending++
		}
	}
	r.Blocking = blocking > 0
	switch {
	case blocking > 0:
		r.Summary = fmt.Sprintf("recovery is blocked: %d blocking, %d pending", blocking, pending)
	case pending > 0:
		r.Summary = fmt.Sprintf("nothing blocks recovery; %d pending", pending)
	default:
		r.Summary = "nothing blocks recovery"
	}
	return *r
}

// kindOrder ranks finding kinds within one impact: what users lose first.
var kindOrder = map[string]int{
	"Workload": 0, "CriticalPod": 0, "BGPPeerWait": 1, "BGPReport": 1, "BGPKeptNotReady": 2, "BGPLeftOut": 2, "EarlyDetection": 2, "Zone": 3,
}

func compareFindings(a, b Finding) int {
	since := func(f Finding) time.Time {
		if f.Since == nil {
			return time.Time{}
		}
		return *f.Since
	}
	return cmp.Or(
		cmp.Compare(a.Impact.rank(), b.Impact.rank()),
		cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind]),
		since(a).Compare(since(b)),
		strings.Compare(a.Object, b.Object),
	)
}

func (e *explainer) add(f Finding) { e.findings = append(e.findings, f) }

// index builds the lookups every section uses.
func (e *explainer) index() {
	e.nodes = make(map[string]nodeInfo, len(e.s.Nodes))
	for _, n := range e.s.Nodes {
		if n == nil {
			continue
		}
		ready, since := kube.Ready(n)
		if since.IsZero() {
			since = n.CreationTimestamp.Time
		}
		ni := nodeInfo{node: n, ready: ready, since: since, zone: zone.ZoneKeyFromLabels(n.Labels)}
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
				ni.evictionTaint = true
			}
		}
		e.nodes[n.Name] = ni
	}

	every := e.s
	every.Policies = []*v1alpha1.RecoveryPolicy{everyPodPolicy()}
	everyPlan := rescue.PlanFor(every)
	e.every = make(map[podKey]*rescue.CriticalPod, len(everyPlan.Critical))
	for i := range everyPlan.Critical {
		cp := &everyPlan.Critical[i]
		e.every[podKey{cp.Namespace, cp.Name}] = cp
	}

	e.podsByOwner = map[types.UID][]*corev1.Pod{}
	for _, p := range e.s.Pods {
		if p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
			e.podsByOwner[ref.UID] = append(e.podsByOwner[ref.UID], p)
		}
	}
	e.rsDeployment = map[types.UID]types.UID{}
	for _, rs := range e.s.ReplicaSets {
		if rs == nil {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.Kind == "Deployment" {
			e.rsDeployment[rs.UID] = ref.UID
		}
	}
	e.critical = map[podKey]int{}
	e.covered = map[podKey]bool{}
}

// zoneOf returns the zone model's result for a zone key.
func (e *explainer) zoneOf(key string) zone.ZoneResult {
	z, _ := e.plan.Zones.Zone(key)
	return z
}

func (e *explainer) explainZones() {
	r := e.report
	cfg := e.s.ZoneConfig
	r.FullDisruptionMode = e.plan.Zones.FullDisruptionMode
	notReady := map[string][]string{}
	for name, n := range e.nodes {
		if !n.ready && !zone.IsExcludedFromDisruption(n.node.Labels) {
			notReady[n.zone] = append(notReady[n.zone], name)
		}
	}
	for _, z := range e.plan.Zones.Zones {
		names := notReady[z.Zone]
		slices.Sort(names)
		if names == nil {
			names = []string{}
		}
		frac := 0.0
		if z.Total > 0 {
			frac = float64(z.NotReady) / float64(z.Total)
		}
		zr := Zone{
			Zone:                      zone.DisplayZone(z.Zone),
			State:                     z.State.String(),
			NotReady:                  z.NotReady,
			Total:                     z.Total,
			Excluded:                  z.Excluded,
			NotReadyFraction:          frac,
			UnhealthyZoneThreshold:    cfg.UnhealthyZoneThreshold,
			LargeZone:                 int32(z.Total) > cfg.LargeClusterSizeThreshold,
			LargeClusterSizeThreshold: cfg.LargeClusterSizeThreshold,
			EvictionRate:              z.Rate,
			StateReason:               z.StateReason,
			RateReason:                z.RateReason,
			NotReadyNodes:             names,
		}
		r.Zones = append(r.Zones, zr)
		if z.State == zone.PartialDisruption || z.State == zone.FullDisruption {
			e.add(Finding{
				Impact: ImpactInfo,
				Kind:   "Zone",
				Object: "Zone " + zr.Zone,
				Cause: fmt.Sprintf("%s: %s. NoExecute eviction rate %g/s: %s",
					zr.State, z.StateReason, z.Rate, z.RateReason),
			})
		}
	}
}

// upstreamShort is the short answer to "when does upstream move it".
func (e *explainer) upstreamShort(cp *rescue.CriticalPod) string {
	switch {
	case cp.Terminating:
		return "moot: already deleted"
	case !cp.UpstreamEviction.IsZero():
		s := "at " + stamp(cp.UpstreamEviction)
		if d := cp.UpstreamEviction.Sub(e.now); d > 0 {
			s += " (in " + short(d) + ")"
		}
		if cp.UpstreamEstimated {
			s += ", estimated from the zone's tainting rate"
		}
		if cp.Workload.Kind == "StatefulSet" {
			s += "; an evicted StatefulSet pod stays Terminating on its NotReady node, blocking its replacement, until the node returns or is fenced"
		}
		return s
	}
	n := e.nodes[cp.Node]
	if n.ready {
		return earlyUpstream
	}
	z := e.zoneOf(cp.Zone)
	if !n.evictionTaint && z.Rate <= 0 {
		if e.plan.Zones.FullDisruptionMode {
			return fmt.Sprintf("never: every zone is FullDisruption (zone %s), kube-controller-manager taints no node", zone.DisplayZone(cp.Zone))
		}
		return fmt.Sprintf("never: zone %s in %s", zone.DisplayZone(cp.Zone), z.State)
	}
	return "never: the pod tolerates the node's NoExecute taint without tolerationSeconds"
}

// earlyUpstream is upstream's answer for a pod on a node the API still
// has Ready.
const earlyUpstream = "not before the API has the node NotReady (at the end of its node grace period) and the pod's toleration runs out"

// earlyDead: the API has the node Ready, and it is dead on both planes.
func (e *explainer) earlyDead(node string) bool {
	n, known := e.nodes[node]
	return known && n.ready && e.s.Verdicts[node].Early
}

// criticalImpact ranks a planner decision.
func criticalImpact(cp *rescue.CriticalPod) Impact {
	switch cp.Decision {
	case rescue.DecisionSkip, rescue.DecisionReplaced:
		return ImpactInfo
	case rescue.DecisionNotYet, rescue.DecisionLeftToUpstream, rescue.DecisionInFlight, rescue.DecisionRateLimited:
		return ImpactPending
	default:
		// Act (not done yet), WaitingForFencing, ReportOnly, Suspended,
		// NoTarget (nothing can run the replacement), Held (full
		// disruption, a node a witness that reaches the API sees alive,
		// or a pod no taint keeps off its node, rescued once already).
		return ImpactBlocking
	}
}

// reboundSays renders the planner's decision for people.
func reboundSays(cp *CriticalPod) string {
	head := cp.Decision
	if cp.Action != "" {
		head += " " + cp.Action
	}
	if cp.DryRun {
		head += " (dry run)"
	}
	s := fmt.Sprintf("%s under policy %s: %s", head, cp.Policy, cp.Reason)
	if cp.Decision == string(rescue.DecisionAct) && !cp.DryRun {
		s += " (done on the next pass of `rebound controller`, if it runs)"
	}
	return s
}

func (e *explainer) explainCriticalPods() {
	actions := map[podKey]rescue.Action{}
	for _, a := range e.plan.Actions {
		if a.Pod != "" {
			actions[podKey{a.Namespace, a.Pod}] = a
		}
	}
	for i := range e.plan.Critical {
		cp := &e.plan.Critical[i]
		z := e.zoneOf(cp.Zone)
		out := CriticalPod{
			Namespace:         cp.Namespace,
			Name:              cp.Name,
			Node:              cp.Node,
			Zone:              zone.DisplayZone(cp.Zone),
			ZoneState:         z.State.String(),
			Workload:          WorkloadRef{Class: string(cp.Workload.Class), Kind: cp.Workload.Kind, Name: cp.Workload.Name, Why: cp.Workload.Why},
			Policy:            cp.Policy,
			NotReadySince:     cp.NotReadySince.UTC(),
			ReadyInAPI:        e.nodes[cp.Node].ready,
			DetectedAt:        cp.DetectedAt.UTC(),
			Deadline:          cp.Deadline.UTC(),
			Terminating:       cp.Terminating,
			DeletedBy:         e.deletedBy(podKey{cp.Namespace, cp.Name}),
			UpstreamEstimated: cp.UpstreamEstimated,
			Upstream:          e.upstreamShort(cp),
			UpstreamReason:    cp.UpstreamReason,
			Stranded:          cp.Stranded,
			Decision:          string(cp.Decision),
			NodeAlive:         nodeAlive(e.s.Verdicts[cp.Node]),
			Action:            string(cp.Action),
			Reason:            cp.Reason,
		}
		if !cp.UpstreamEviction.IsZero() {
			t := cp.UpstreamEviction.UTC()
			out.UpstreamEviction = &t
		}
		if a, ok := actions[podKey{cp.Namespace, cp.Name}]; ok {
			out.DryRun = a.DryRun
		}
		e.critical[podKey{cp.Namespace, cp.Name}] = len(e.report.CriticalPods)
		e.report.CriticalPods = append(e.report.CriticalPods, out)
	}
}

// explainUncoveredCriticalPods adds a finding for each critical pod that no
// workload finding already tells about (Jobs, bare pods, workloads still
// Available).
func (e *explainer) explainUncoveredCriticalPods() {
	for i := range e.plan.Critical {
		cp := &e.plan.Critical[i]
		k := podKey{cp.Namespace, cp.Name}
		if e.covered[k] || cp.Decision == rescue.DecisionSkip {
			continue
		}
		out := &e.report.CriticalPods[e.critical[k]]
		cause := fmt.Sprintf("%s (zone %s %s); upstream eviction %s", nodeDown(out, e.now), out.Zone, out.ZoneState, out.Upstream)
		if out.DeletedBy != nil {
			cause += "; " + deletedByText(out.DeletedBy)
		}
		f := Finding{
			Impact:  criticalImpact(cp),
			Kind:    "CriticalPod",
			Object:  "Pod " + cp.Key(),
			Cause:   cause,
			Rebound: reboundSays(out),
		}
		if since := downSince(out); !since.IsZero() {
			f.Since = &since
		}
		e.add(f)
	}
}

func (e *explainer) explainPolicies() {
	for _, p := range e.plan.Policies {
		src := "cluster"
		if e.x.BuiltInPolicy {
			src = "built-in"
		}
		e.report.Policies = append(e.report.Policies, Policy{
			Name: p.Name, Source: src, Valid: p.Valid, Error: p.Error, Suspended: p.Suspended, DryRun: p.DryRun,
			Critical: p.Critical, Stranded: p.Stranded, WaitingForFencing: p.WaitingForFencing,
			Actions: p.Actions, RateLimited: p.RateLimited, NoTarget: p.NoTarget, Held: p.Held,
		})
		if !p.Valid {
			e.report.Warnings = append(e.report.Warnings, fmt.Sprintf("RecoveryPolicy %s is invalid and selects no pod: %s", p.Name, p.Error))
		}
	}
	if len(e.plan.Policies) == 0 {
		e.report.Warnings = append(e.report.Warnings, "no RecoveryPolicy exists: rebound considers no pod critical (kubectl apply -f deploy/policy/default-recoverypolicy.yaml)")
	}
}

// downSince is when the pod's node went down by the clock that counts for
// it: its NotReady transition, or, while the API still has it Ready, when
// it was found dead on both planes; zero when neither is known.
func downSince(c *CriticalPod) time.Time {
	if c.ReadyInAPI || c.NotReadySince.IsZero() {
		return c.DetectedAt
	}
	return c.NotReadySince
}

// nodeDown says how the pod's node is down, for a cause: never a NotReady
// duration for a node the API still has Ready, never a duration from an
// unknown time.
func nodeDown(c *CriticalPod, now time.Time) string {
	switch {
	case c.ReadyInAPI && !c.DetectedAt.IsZero():
		return fmt.Sprintf("on node %s, Ready in the API but dead on both planes since %s (%s)", c.Node, stamp(c.DetectedAt), short(now.Sub(c.DetectedAt)))
	case c.ReadyInAPI:
		return fmt.Sprintf("on node %s, Ready in the API", c.Node)
	case c.NotReadySince.IsZero():
		return fmt.Sprintf("on NotReady node %s", c.Node)
	}
	return fmt.Sprintf("on NotReady node %s for %s", c.Node, short(now.Sub(c.NotReadySince)))
}

// stamp renders a time for reasons: UTC, to the second, as the planner does.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// short renders a duration to the second.
func short(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// liveness lists the verdicts of the nodes that are not plainly Alive, by
// name.
func (e *explainer) liveness() []NodeLiveness {
	out := []NodeLiveness{}
	for name, v := range e.s.Verdicts {
		if v.Verdict == liveness.Alive && !v.LeaseStale {
			continue
		}
		l := NodeLiveness{Node: name, Verdict: string(v.Verdict), ReadyInAPI: e.nodes[name].ready, Since: v.Since.UTC(), Veto: v.Veto,
			Observers: v.Observers, DownVotes: v.DownVotes, UpVotes: v.UpVotes, LeaseStale: v.LeaseStale,
			GossipWatchers: v.GossipWatchers, GossipDown: v.GossipDown, GossipUp: v.GossipUp, Early: v.Early, Reason: v.Reason}
		if !v.LeaseRenewSeen.IsZero() {
			age := Seconds(math.Round(e.s.Now.Sub(v.LeaseRenewSeen).Seconds()*10) / 10)
			l.LeaseAge = &age
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b NodeLiveness) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// nodeAlive is the evidence of a CutOffFromAPI verdict, "" otherwise.
func nodeAlive(v liveness.NodeVerdict) string {
	if v.Verdict == liveness.CutOffFromAPI {
		return v.Reason
	}
	return ""
}
