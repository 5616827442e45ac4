package rescue

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/zone"
)

// The "never worse than upstream" rules: full disruption hold, NoTarget
// for each admission filter, the BGP liveness signal, one bounce per
// incident, and the in-memory rate-limit ledger.

// node0 returns S1's only Ready node.
func node0(w *world) *corev1.Node { return w.s.Nodes[0] }

func withRequests(p *corev1.Pod, cpu string) {
	p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}
}

func allocatable(n *corev1.Node, cpu, pods string) {
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourcePods: resource.MustParse(pods)}
}

// runningOn adds a non-critical pod bound to node.
func (w *world) runningOn(name, node, cpu string, phase corev1.PodPhase) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	withRequests(p, cpu)
	w.s.Pods = append(w.s.Pods, p)
}

func TestFullDisruptionHold(t *testing.T) {
	allDown := func(now time.Time) *world {
		w := s1(now)
		node0(w).Status.Conditions[0].Status = corev1.ConditionUnknown
		node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)
		return w
	}
	tests := []planCase{
		{
			name:      "every node NotReady: Held, nothing deleted",
			world:     func() *world { return allDown(at(5 * time.Minute)) },
			decisions: map[string]Decision{coredns: DecisionHeld},
			reasons:   map[string]string{coredns: "every node is NotReady (5 of 5): like kube-controller-manager in full disruption, rebound evicts nothing"},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Held != 1 || r.Stranded != 1 || !strings.Contains(r.Blocked, "Held") {
					t.Errorf("report = %+v", r)
				}
			},
		},
		{
			name: "every node NotReady, fenced StatefulSet pod: Held, no force delete",
			world: func() *world {
				w := allDown(at(5 * time.Minute))
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{outOfService()}
				w.pod("etcd-0", "node-3", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionHeld, "etcd-0": DecisionHeld},
		},
		{
			// The hold reads the nodes, never the zone model's flag: a
			// previous plan that says Normal (or a FullDisruptionMode that
			// cleared too early, see pkg/zone) changes nothing.
			name: "every node of two zones NotReady, previous zones Normal: still Held",
			world: func() *world {
				w := newWorld(at(5 * time.Minute))
				w.zoneOf("z1", 0, 3)
				w.zoneOf("z2", 0, 2)
				w.deploymentPod("coredns", "z1-down-1", 1, 0)
				w.policy("default")
				w.s.PreviousZones = zone.Cluster{}
				w.s.PreviousZones.FullDisruptionMode = false
				return w
			},
			decisions: map[string]Decision{coredns: DecisionHeld},
		},
		{
			name: "scale restore is never held: it puts back what rebound took",
			world: func() *world {
				w := allDown(at(5 * time.Minute))
				d := w.s.Deployments[0]
				d.Annotations = map[string]string{ScaleBounceAnnotation: "1"}
				d.Spec.Replicas = ptr(int32(0))
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionInFlight},
			actions:   []string{"ScaleRestore kube-system/coredns"},
		},
	}
	runPlanCases(t, tests)
}

func TestNoTarget(t *testing.T) {
	noTarget := func(why string) map[string]string {
		return map[string]string{coredns: "no Ready node can run the replacement (" + why}
	}
	noTargetAt := at(time.Minute + noTargetRecheck) // re-checked without new input
	tests := []planCase{
		{
			name: "only Ready node cordoned: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Spec.Unschedulable = true
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("cordoned (spec.unschedulable): node-0; NotReady: 4 node(s))"),
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.NoTarget != 1 || r.Actions != 0 || !strings.Contains(r.Blocked, "kube-system/"+coredns+" NoTarget") {
					t.Errorf("report = %+v", r)
				}
			},
		},
		{
			name: "cordoned, but the pod tolerates unschedulable: Act",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Spec.Unschedulable = true
				p := w.s.Pods[0]
				p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "Ready node node-0 admits the replacement"},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "NoSchedule taint not tolerated: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("taint dedicated=db:NoSchedule not tolerated: node-0"),
		},
		{
			name: "NoExecute taint not tolerated: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("taint maintenance:NoExecute not tolerated: node-0"),
		},
		{
			name: "PreferNoSchedule taint and tolerated NoSchedule taint: Act",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Spec.Taints = []corev1.Taint{{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}, {Key: "dedicated", Value: "dns", Effect: corev1.TaintEffectNoSchedule}}
				p := w.s.Pods[0]
				p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "dns"})
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "nodeSelector not matched: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Pods[0].Spec.NodeSelector = map[string]string{"role": "infra"}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("nodeSelector/required node affinity not matched: node-0"),
		},
		{
			name: "required node affinity not matched: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Pods[0].Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-3"}}},
					}}}}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("nodeSelector/required node affinity not matched: node-0"),
		},
		{
			name: "required node affinity matched: Act",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Labels["role"] = "infra"
				w.s.Pods[0].Spec.NodeSelector = map[string]string{"role": "infra"}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "requests above allocatable minus what is requested there: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				allocatable(node0(w), "1", "110")
				w.runningOn("big", "node-0", "800m", corev1.PodRunning)
				w.runningOn("done", "node-0", "800m", corev1.PodSucceeded) // terminal: holds nothing
				withRequests(w.s.Pods[0], "500m")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("insufficient cpu (requests 500m, free 200m): node-0"),
		},
		{
			// The same, with the Ready node's pods given as the caller's
			// running sums (the controller's Snapshot.Usage), not as pods.
			name: "requests above allocatable minus Snapshot.Usage: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				allocatable(node0(w), "1", "110")
				w.runningOn("big", "node-0", "800m", corev1.PodRunning)
				w.runningOn("done", "node-0", "800m", corev1.PodSucceeded)
				withRequests(w.s.Pods[0], "500m")
				w.s.Usage = map[string]NodeUsage{}
				var kept []*corev1.Pod
				for _, p := range w.s.Pods {
					if p.Spec.NodeName != "node-0" {
						kept = append(kept, p)
						continue
					}
					if node, req, ok := PodUsage(p); ok {
						u := w.s.Usage[node]
						u.Add(req)
						w.s.Usage[node] = u
					}
				}
				w.s.Pods = kept
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("insufficient cpu (requests 500m, free 200m): node-0"),
		},
		{
			name: "requests fit: Act",
			world: func() *world {
				w := s1(at(time.Minute))
				allocatable(node0(w), "1", "110")
				w.runningOn("small", "node-0", "300m", corev1.PodRunning)
				withRequests(w.s.Pods[0], "500m")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "no free pod slot: NoTarget",
			world: func() *world {
				w := s1(at(time.Minute))
				allocatable(node0(w), "4", "1")
				w.runningOn("small", "node-0", "100m", corev1.PodRunning)
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("too many pods (1 of 1): node-0"),
		},
		{
			name: "many rejected nodes are summarised by reason",
			world: func() *world {
				w := s1(at(time.Minute))
				node0(w).Spec.Unschedulable = true
				for i := range 5 {
					n := w.node("extra-"+string(rune('a'+i)), "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
					n.Spec.Unschedulable = true
				}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			nextCheck: noTargetAt,
			reasons:   noTarget("cordoned (spec.unschedulable): extra-a, extra-b, extra-c (+3 more); NotReady: 4 node(s))"),
		},
		{
			name:      "NoTarget also stops a scale bounce",
			nextCheck: at(5*time.Minute + noTargetRecheck),
			world: func() *world {
				w := s1(at(5 * time.Minute))
				terminating(w.s.Pods[0], at(31*time.Second))
				node0(w).Spec.Unschedulable = true
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
		},
	}
	runPlanCases(t, tests)
}

// TestCutOffFromAPI: the liveness verdict CutOffFromAPI (a witness that
// reaches the API sees the node alive) holds every pod on the node:
// stateless ones are not stranded, stateful ones wait for fencing and are
// never force-deleted.
func TestCutOffFromAPI(t *testing.T) {
	const evidence = "node-2 reports a BGP session Established with it since 2026-03-01T12:00:10Z, after its NotReady transition"
	alive := func(w *world) *world {
		w.s.Verdicts = map[string]liveness.NodeVerdict{"node-3": {Verdict: liveness.CutOffFromAPI, Reason: evidence}}
		return w
	}
	sts := func(w *world, taints ...corev1.Taint) *world {
		w.s.Nodes[3].Spec.Taints = append(w.s.Nodes[3].Spec.Taints, taints...)
		w.pod("etcd-0", "node-3", "StatefulSet", "etcd")
		return w
	}
	heldAlive := "yet a witness that reaches the API sees it alive (cut off from the API, not dead: " + evidence + "): a node seen alive is not stranded"
	tests := []planCase{
		{
			name:      "stateless pod on a node alive but cut off: Held, not stranded, the reason names the evidence",
			world:     func() *world { return alive(s1(at(time.Minute))) },
			decisions: map[string]Decision{coredns: DecisionHeld},
			reasons:   map[string]string{coredns: heldAlive},
			nextCheck: at(time.Minute + evidenceRecheck),
			check: func(t *testing.T, p Plan) {
				if p.Critical[0].Stranded || p.Policies[0].Stranded != 0 || p.Policies[0].Held != 1 {
					t.Errorf("critical %+v, policy %+v: want held, not stranded", p.Critical[0], p.Policies[0])
				}
			},
		},
		{
			name: "stateless pod deleted before the evidence came, replacement short past the timeout: no scale bounce",
			world: func() *world {
				w := alive(s1(at(5 * time.Minute)))
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionHeld},
			reasons:   map[string]string{coredns: "appears alive to a witness that reaches the API (cut off from the API, not dead: " + evidence + "): a node seen alive is not stranded, so no ScaleDown"},
			nextCheck: at(5*time.Minute + evidenceRecheck),
		},
		{
			name:      "stateful pod, not fenced, alive: WaitingForFencing with the evidence",
			world:     func() *world { return alive(sts(s1(at(time.Minute)))) },
			decisions: map[string]Decision{coredns: DecisionHeld, "etcd-0": DecisionWaitingForFencing},
			reasons:   map[string]string{"etcd-0": "appears alive but cut off from the API (cut off from the API, not dead: " + evidence + ")"},
			nextCheck: at(time.Minute + evidenceRecheck),
		},
		{
			name:      "stateful pod, fenced but alive: Held, never force-deleted",
			world:     func() *world { return alive(sts(s1(at(time.Minute)), outOfService())) },
			decisions: map[string]Decision{coredns: DecisionHeld, "etcd-0": DecisionHeld},
			reasons:   map[string]string{"etcd-0": "fenced (node.kubernetes.io/out-of-service:NoExecute) yet it appears alive (cut off from the API, not dead: " + evidence + "): the two signals disagree"},
			nextCheck: at(time.Minute + evidenceRecheck),
		},
		{
			name:      "stateful pod, fenced, no liveness evidence: ForceDelete",
			world:     func() *world { return sts(s1(at(time.Minute)), outOfService()) },
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns, "ForceDelete kube-system/etcd-0"},
		},
		{
			name: "out-of-service with effect NoSchedule is not fencing",
			world: func() *world {
				return sts(s1(at(time.Minute)), corev1.Taint{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoSchedule})
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionWaitingForFencing},
			actions:   []string{"Delete kube-system/" + coredns},
		},
	}
	runPlanCases(t, tests)
}

func TestBounceOncePerIncident(t *testing.T) {
	// S1 at 5 min: the pod was deleted at 31 s, its replacement never
	// came; node-3 NotReady since t0 (12:00:00).
	short := func(mutate func(*world)) func() *world {
		return func() *world {
			w := s1(at(5 * time.Minute))
			terminating(w.s.Pods[0], at(31*time.Second))
			mutate(w)
			return w
		}
	}
	bounced := func(v string) func(*world) {
		return func(w *world) { w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: v} }
	}
	tests := []planCase{
		{
			name:      "short past the timeout, none available, never bounced: ScaleDown recording the incident",
			world:     short(func(*world) {}),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ScaleDown kube-system/coredns"},
			check: func(t *testing.T, p Plan) {
				if a := p.Actions[0]; !a.Incident.Equal(t0) {
					t.Errorf("incident = %v, want the node's NotReady transition %v", a.Incident, t0)
				}
			},
		},
		{
			name:      "bounced for this incident: ReportOnly",
			world:     short(bounced("2026-03-01T12:00:00Z")),
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident"},
		},
		{
			// The 10-record history has long forgotten the bounce; the
			// Deployment has not.
			name: "bounced for this incident, status.lastActions full of other records: still ReportOnly",
			world: short(func(w *world) {
				bounced("2026-03-01T12:00:00Z")(w)
				for i := range LastActionsCapacity {
					w.s.Policies[0].Status.LastActions = append(w.s.Policies[0].Status.LastActions,
						record(v1alpha1.RecordedDeleteAndReplace, "kube-system/other-"+string(rune('a'+i)), at(4*time.Minute)))
				}
			}),
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident"},
		},
		{
			name:      "bounced for an earlier incident: a new one may bounce",
			world:     short(bounced("2026-03-01T11:00:00Z")),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ScaleDown kube-system/coredns"},
		},
		{
			name:      "unreadable annotation: fail closed",
			world:     short(bounced("yesterday")),
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: `annotation rebound.dev/scale-bounced-for="yesterday" is not an RFC 3339 time`},
		},
		{
			name: "a replica is available: no bounce, it would restart it",
			world: func() *world {
				w := newWorld(at(5 * time.Minute))
				w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
				for _, n := range []string{"node-1", "node-2", "node-3", "node-4"} {
					w.node(n, "z1", corev1.ConditionUnknown, t0)
				}
				w.deploymentPod("coredns", "node-3", 2, 1)
				w.policy("default")
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "Deployment coredns has 1 replica(s) available: no scale bounce"},
		},
	}
	runPlanCases(t, tests)
}

// TestChangeDeployment: the executor's checks on the Deployment it re-reads
// from the API, and that applying the same action twice changes nothing the
// second time.
func TestChangeDeployment(t *testing.T) {
	fresh := func() *appsv1.Deployment {
		w := s1(t0)
		return w.s.Deployments[0]
	}
	down := Action{Kind: ActionScaleDown, UID: "uid-Deployment-coredns", ResourceVersion: "7", Replicas: 1, Incident: t0}
	d := fresh()
	if r, why := down.ChangeDeployment(d); r != "" {
		t.Fatalf("first scale-down: %s %s", r, why)
	}
	if *d.Spec.Replicas != 0 || d.Annotations[ScaleBounceAnnotation] != "1" || d.Annotations[ScaleBouncedForAnnotation] != "2026-03-01T12:00:00Z" {
		t.Fatalf("after scale-down: replicas %d, annotations %v", *d.Spec.Replicas, d.Annotations)
	}
	if r, _ := down.ChangeDeployment(d); r != ResultRefused {
		t.Errorf("second scale-down of the same incident: %q, want Refused", r)
	}
	restore := Action{Kind: ActionScaleRestore, UID: "uid-Deployment-coredns", ResourceVersion: "7", Replicas: 1}
	if r, why := restore.ChangeDeployment(d); r != "" {
		t.Fatalf("restore: %s %s", r, why)
	}
	if r, _ := restore.ChangeDeployment(d); r != ResultAlreadyDone {
		t.Errorf("second restore: %q, want AlreadyDone", r)
	}
	if _, kept := d.Annotations[ScaleBouncedForAnnotation]; !kept || *d.Spec.Replicas != 1 {
		t.Errorf("after restore: replicas %d, annotations %v (the incident mark must stay)", *d.Spec.Replicas, d.Annotations)
	}

	for name, tc := range map[string]struct {
		mutate func(*appsv1.Deployment)
		want   string
	}{
		"recreated":         {func(d *appsv1.Deployment) { d.UID = "other" }, ResultAlreadyDone},
		"changed":           {func(d *appsv1.Deployment) { d.ResourceVersion = "8" }, ResultAlreadyDone},
		"replica available": {func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }, ResultRefused},
		"bounced (stale RV)": {func(d *appsv1.Deployment) {
			d.Annotations = map[string]string{ScaleBouncedForAnnotation: "2026-03-01T12:00:00Z"}
		}, ResultRefused},
	} {
		d := fresh()
		tc.mutate(d)
		if r, _ := down.ChangeDeployment(d); r != tc.want {
			t.Errorf("%s: %q, want %q", name, r, tc.want)
		}
		if *d.Spec.Replicas != 1 {
			t.Errorf("%s: replicas changed to %d although refused", name, *d.Spec.Replicas)
		}
	}
}

func TestRateLimitLedger(t *testing.T) {
	oneAMinute := func(p *v1alpha1.RecoveryPolicy) { p.Spec.Limits.MaxActionsPerMinute = 1 }
	twoAMinute := func(p *v1alpha1.RecoveryPolicy) { p.Spec.Limits.MaxActionsPerMinute = 2 }
	earlier := record(v1alpha1.RecordedDeleteAndReplace, "kube-system/other", at(50*time.Second))
	base := func(mutate func(*v1alpha1.RecoveryPolicy)) *world {
		w := newWorld(at(time.Minute))
		w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
		for _, n := range []string{"node-1", "node-2", "node-3", "node-4"} {
			w.node(n, "z1", corev1.ConditionUnknown, t0)
		}
		w.deploymentPod("coredns", "node-3", 1, 0)
		w.policy("default", mutate)
		return w
	}
	tests := []planCase{
		{
			// The status write of 10 s ago is not in the cache yet; the
			// ledger has it.
			name: "action in the ledger, not yet in the cached status: rate-limited",
			world: func() *world {
				w := base(oneAMinute)
				w.s.RecentActions = []LedgerEntry{{Policy: "default", Record: earlier}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionRateLimited},
			nextCheck: at(110 * time.Second),
		},
		{
			name: "the same action in ledger and status counts once",
			world: func() *world {
				w := base(twoAMinute)
				dup := earlier
				dup.Time = metav1.NewTime(dup.Time.Add(300 * time.Millisecond)) // the ledger's sub-second time
				w.s.RecentActions = []LedgerEntry{{Policy: "default", Record: dup}}
				w.s.Policies[0].Status.LastActions = []v1alpha1.ActionRecord{earlier}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if n := p.Policies[0].ActionsLastMinute; n != 1 {
					t.Errorf("ActionsLastMinute = %d, want 1", n)
				}
			},
		},
		{
			name: "another policy's ledger entries do not count",
			world: func() *world {
				w := base(oneAMinute)
				w.s.RecentActions = []LedgerEntry{{Policy: "other", Record: earlier}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "ledger entries older than a minute do not count",
			world: func() *world {
				w := base(oneAMinute)
				old := earlier
				old.Time = metav1.NewTime(at(-5 * time.Second))
				w.s.RecentActions = []LedgerEntry{{Policy: "default", Record: old}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
	}
	runPlanCases(t, tests)
}

// TestFullDisruptionHeal: the partition heals node by node. The first plan
// that sees node-0 Ready again must not find node-3's pod stranded (its
// node was NotReady for minutes, but only because the control plane was
// cut off): the maxUnavailableTime clock restarts a node grace period
// after the full disruption ends, as kube-controller-manager resets its
// nodes' probe times then (the state is carried from plan to plan in
// Plan.Disruption / Snapshot.PreviousDisruption).
func TestFullDisruptionHeal(t *testing.T) {
	w := s1(at(5 * time.Minute))
	n0 := node0(w)
	n0.Status.Conditions[0].Status = corev1.ConditionUnknown
	n0.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)
	held := PlanFor(w.s)
	if !held.Disruption.Active || held.Critical[0].Decision != DecisionHeld {
		t.Fatalf("all NotReady: disruption %+v, decision %s", held.Disruption, held.Critical[0].Decision)
	}

	// node-0 is back first.
	w.s.Now = at(5*time.Minute + 2*time.Second)
	n0.Status.Conditions[0].Status = corev1.ConditionTrue
	n0.Status.Conditions[0].LastTransitionTime = metav1.NewTime(w.s.Now)
	w.s.PreviousDisruption = held.Disruption
	healing := PlanFor(w.s)
	if healing.Disruption.Active || !healing.Disruption.EndedAt.Equal(w.s.Now) {
		t.Fatalf("disruption after node-0 returned: %+v", healing.Disruption)
	}
	cp := healing.Critical[0]
	if cp.Decision != DecisionNotYet || len(healing.Actions) != 0 || !strings.Contains(cp.Reason, "the clock restarted at 2026-03-01T12:05:52Z, the node grace period 50s after a stall ended at 2026-03-01T12:05:02Z") {
		t.Fatalf("healing: %s %q, actions %v", cp.Decision, cp.Reason, healing.Actions)
	}
	if want := w.s.Now.Add(50*time.Second + 30*time.Second); !cp.Deadline.Equal(want) || !healing.NextCheck.Equal(want) {
		t.Errorf("deadline %v, next check %v, want both %v", cp.Deadline, healing.NextCheck, want)
	}

	// A maxUnavailableTime after the heal, but within the node grace
	// period: other nodes may still be on their way back.
	w.s.Now = w.s.Now.Add(31 * time.Second)
	w.s.PreviousDisruption = healing.Disruption
	if p := PlanFor(w.s); p.Critical[0].Decision != DecisionNotYet {
		t.Errorf("a maxUnavailableTime after the heal, within the grace: %s, want NotYet", p.Critical[0].Decision)
	}
	// node-3 still NotReady a grace period and a whole maxUnavailableTime
	// after the heal: now it is stranded, and rebound acts.
	w.s.Now = w.s.Now.Add(50 * time.Second)
	later := PlanFor(w.s)
	if later.Critical[0].Decision != DecisionAct {
		t.Errorf("the grace and a maxUnavailableTime after the heal: %s, want Act", later.Critical[0].Decision)
	}
}

// TestFullDisruptionHealUnseen: a planner that never saw the full
// disruption (the controller restarted, or was cut off from the apiserver
// with the nodes) reads its end from the nodes: node-0, the only Ready
// node, returned after node-3 went NotReady, so node-3's clock starts at
// node-0's return plus the node grace period, not at its own NotReady
// transition long ago.
func TestFullDisruptionHealUnseen(t *testing.T) {
	returned := at(5 * time.Minute)
	w := s1(returned.Add(10 * time.Second))
	node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(returned)
	p := PlanFor(w.s)
	cp := p.Critical[0]
	if cp.Decision != DecisionNotYet || len(p.Actions) != 0 || !strings.Contains(cp.Reason, "the clock restarted at 2026-03-01T12:05:50Z, the node grace period 50s after the first node Ready now returned at 2026-03-01T12:05:00Z") {
		t.Fatalf("fresh planner after an unseen full disruption: %s %q, actions %v", cp.Decision, cp.Reason, p.Actions)
	}
	if want := returned.Add(50*time.Second + 30*time.Second); !cp.Deadline.Equal(want) || !p.NextCheck.Equal(want) {
		t.Errorf("deadline %v, next check %v, want both %v", cp.Deadline, p.NextCheck, want)
	}
	w.s.Now = returned.Add(81 * time.Second)
	if p := PlanFor(w.s); p.Critical[0].Decision != DecisionAct {
		t.Errorf("a maxUnavailableTime after node-0's return: %s, want Act", p.Critical[0].Decision)
	}
}

// TestFullDisruptionHealUnseenNeedsEveryReadyNode: one node Ready since
// before node-3 went NotReady rules out a full disruption, however
// recently the others returned: node-3's clock is its own.
func TestFullDisruptionHealUnseenNeedsEveryReadyNode(t *testing.T) {
	w := s1(at(40 * time.Second))
	w.node("node-5", "z1", corev1.ConditionTrue, at(20*time.Second)) // flapped and returned
	p := PlanFor(w.s)
	if cp := p.Critical[0]; cp.Decision != DecisionAct || !cp.Deadline.Equal(at(30*time.Second)) || strings.Contains(cp.Reason, "restarted") {
		t.Fatalf("node-0 Ready throughout: %s, deadline %v, %q; want Act with the deadline from node-3's own NotReady", cp.Decision, cp.Deadline, cp.Reason)
	}
}

// TestBounceCoversAfterARestart: a node marked early and bounced for goes
// NotReady up to one node grace later. A restarted controller holds early
// judgement and takes the mark off, so the incident then reads as the
// NotReady transition; the bounce recorded at the mark still covers it.
func TestBounceCoversAfterARestart(t *testing.T) {
	bounced := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)
	ann := map[string]string{ScaleBouncedForAnnotation: bounced.Format(time.RFC3339)}
	const grace = 50 * time.Second
	for _, tc := range []struct {
		name     string
		notReady time.Time
		covered  bool
	}{
		{"NotReady 40 s after the mark: the same incident", bounced.Add(40 * time.Second), true},
		{"NotReady a whole grace after the mark: the same incident", bounced.Add(grace), true},
		{"NotReady past the grace: a new incident", bounced.Add(grace + time.Second), false},
		{"control: the mark's own time", bounced, true},
	} {
		if _, got := BounceCovers(ann, tc.notReady, grace); got != tc.covered {
			t.Errorf("%s: covered %v, want %v", tc.name, got, tc.covered)
		}
	}
	if _, got := BounceCovers(ann, bounced.Add(time.Second), 0); got {
		t.Error("without slack, a later NotReady transition is covered: the row above tests nothing")
	}
}
