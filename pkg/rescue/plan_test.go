package rescue

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/zone"
)

// coredns is the critical pod of the seed scenarios.
const coredns = "coredns-5d4f-x1"

// planCase is one row of TestPlanFor and TestPlanForRescueLifecycle.
type planCase struct {
	name  string
	world func() *world
	// decisions lists every critical pod expected in the plan.
	decisions map[string]Decision
	// reasons holds a substring expected in a pod's reason.
	reasons map[string]string
	// actions are the expected Action keys, in plan order, "+dry" appended
	// to dry-run ones.
	actions   []string
	nextCheck time.Time
	check     func(t *testing.T, p Plan)
}

// TestPlanFor covers when a pod is stranded (S1, S3, upstream eviction) and
// the safety rule of each workload class (S5, storage, never-touched pods).
func TestPlanFor(t *testing.T) {
	const stsWaiting = "StatefulSet pod: waiting for fencing; add the node.kubernetes.io/out-of-service:NoExecute taint once the node is confirmed off"

	tests := []planCase{
		// S1: PartialDisruption in a small zone stops tainting; the pod
		// would never move.
		{
			name:      "S1 PartialDisruption, past 30s: delete and replace",
			world:     func() *world { return s1(at(31 * time.Second)) },
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons: map[string]string{coredns: "stranded Deployment/coredns pod: delete it so that ReplicaSet coredns-5d4f creates a replacement on a Ready node; " +
				"node node-3 NotReady for 31s >= maxUnavailableTime 30s, upstream eviction never"},
			actions: []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				z, _ := p.Zones.Zone(zone.ZoneKey("r1", "z1"))
				if z.State != zone.PartialDisruption || z.Rate != 0 {
					t.Errorf("zone = %v rate %v, want PartialDisruption rate 0", z.State, z.Rate)
				}
				a := p.Actions[0]
				// The pod's resourceVersion is the delete's precondition.
				if a.UID != "uid-pod-"+coredns || a.ResourceVersion != "3" || a.Policy != "default" || a.Node != "node-3" || a.Pod != coredns || a.DryRun {
					t.Errorf("action = %+v", a)
				}
				// The deadline the action logs: NotReady at 0 plus the policy's 30 s.
				if !a.Deadline.Equal(at(30*time.Second)) || !a.Deadline.Equal(p.Critical[0].Deadline) {
					t.Errorf("action deadline = %v, want %v (the pod's)", a.Deadline, at(30*time.Second))
				}
				if !strings.Contains(p.Critical[0].UpstreamReason, "PartialDisruption with NoExecute tainting rate 0/s: upstream never evicts") {
					t.Errorf("upstream reason = %q", p.Critical[0].UpstreamReason)
				}
				if r := p.Policies[0]; r.Critical != 1 || r.Stranded != 1 || r.Actions != 1 || !r.Valid {
					t.Errorf("policy report = %+v", r)
				}
			},
		},
		{
			name:      "S1 before 30s: not yet, check again at the deadline",
			world:     func() *world { return s1(at(10 * time.Second)) },
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "NotReady for 10s of maxUnavailableTime 30s: stranded at 2026-03-01T12:00:30Z"},
			nextCheck: at(30 * time.Second),
		},
		{
			name:      "S1 exactly at the deadline: stranded",
			world:     func() *world { return s1(at(30 * time.Second)) },
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "non-critical pod on the same node is ignored",
			world: func() *world {
				w := s1(at(31 * time.Second))
				p := w.deploymentPod("web", "node-3", 1, 0)
				p.Spec.PriorityClassName = ""
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "pods on Ready nodes and finished pods are not listed",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.deploymentPod("healthy", "node-0", 1, 1)
				done := w.deploymentPod("done", "node-3", 1, 0)
				done.Status.Phase = corev1.PodSucceeded
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},

		// S3: Normal zone, the node is tainted but pods tolerate 300 s.
		{
			name:      "S3 tainted node, 300s toleration: stranded at 30s",
			world:     func() *world { return s3(at(31 * time.Second)) },
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "upstream eviction 2026-03-01T12:05:05Z"},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				c := p.Critical[0]
				if !c.UpstreamEviction.Equal(at(305*time.Second)) || c.UpstreamEstimated {
					t.Errorf("upstream eviction = %v estimated %v, want %v from the taint", c.UpstreamEviction, c.UpstreamEstimated, at(305*time.Second))
				}
			},
		},
		{
			name: "toleration runs out before maxUnavailableTime: left to upstream",
			world: func() *world {
				w := s3(at(40 * time.Second))
				w.s.Pods[0].Spec.Tolerations = defaultTolerations(ptr(int64(10)))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionLeftToUpstream},
			reasons:   map[string]string{coredns: "upstream eviction at 2026-03-01T12:00:15Z comes by the deadline 2026-03-01T12:00:30Z"},
		},
		{
			name: "no toleration at all: evicted as soon as tainted, left to upstream",
			world: func() *world {
				w := s3(at(6 * time.Second))
				w.s.Pods[0].Spec.Tolerations = nil
				return w
			},
			decisions: map[string]Decision{coredns: DecisionLeftToUpstream},
			reasons:   map[string]string{coredns: "at 2026-03-01T12:00:05Z comes by the deadline"},
		},
		{
			name: "toleration without seconds: upstream never evicts, stranded",
			world: func() *world {
				w := s3(at(31 * time.Second))
				w.s.Pods[0].Spec.Tolerations = defaultTolerations(nil)
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "Normal zone, not tainted yet, no toleration: estimated eviction in time",
			world: func() *world {
				w := s3(at(5 * time.Second))
				w.s.Nodes[3].Spec.Taints = nil
				w.s.Pods[0].Spec.Tolerations = nil
				return w
			},
			decisions: map[string]Decision{coredns: DecisionLeftToUpstream},
			// The estimate is counted from now and slips: look again at
			// the deadline.
			nextCheck: at(30 * time.Second),
			check: func(t *testing.T, p Plan) {
				c := p.Critical[0]
				// rate 0.1/s, nobody ahead: taint by 1/0.1 + 0.1 s = 10.1 s from now.
				if want := at(15*time.Second + 100*time.Millisecond); !c.UpstreamEviction.Equal(want) || !c.UpstreamEstimated {
					t.Errorf("upstream eviction = %v (estimated %v), want estimate %v", c.UpstreamEviction, c.UpstreamEstimated, want)
				}
			},
		},
		{
			name: "Normal zone, not tainted by the deadline: the estimate slipped, stranded",
			world: func() *world {
				w := s3(at(31 * time.Second))
				// kube-controller-manager's NoSchedule taint stays.
				w.s.Nodes[3].Spec.Taints = slices.DeleteFunc(w.s.Nodes[3].Spec.Taints, func(t corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute })
				w.s.Pods[0].Spec.Tolerations = nil
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},

		// S5: identity and exclusive storage move only off fenced nodes.
		{
			name: "S5 StatefulSet pod on an unfenced node: waiting for fencing",
			world: func() *world {
				w := s1(at(time.Minute))
				w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionWaitingForFencing},
			reasons:   map[string]string{"etcd-0": stsWaiting},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.WaitingForFencing != 1 || r.Stranded != 2 {
					t.Errorf("policy report = %+v", r)
				}
			},
		},
		{
			name: "S17 fencing mode Watchdog: waiting, and the node is a fencing target",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Fencing.Mode = v1alpha1.Watchdog
				w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionWaitingForFencing},
			reasons:   map[string]string{"etcd-0": "proven that the node's watchdog reset it"},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if len(p.Fencing) != 1 || p.Fencing[0] != (FencingTarget{Node: "node-2", Pods: 1, Due: true}) {
					t.Errorf("fencing targets = %+v, want node-2 due (the Deployment's pod is not one)", p.Fencing)
				}
			},
		},
		{
			name: "S17 rebound's own taint, before its re-read verified it: still waiting",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Fencing.Mode = v1alpha1.Watchdog
				w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
				w.s.Nodes[2].Annotations = map[string]string{fencing.AnnotationFencedBoot: "b1"}
				w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionWaitingForFencing},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "S17 rebound's own taint, verified: force delete",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Fencing.Mode = v1alpha1.Watchdog
				w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
				w.s.Nodes[2].Annotations = map[string]string{fencing.AnnotationFencedBoot: "b1", fencing.AnnotationVerified: "node-2-1"}
				w.s.Nodes[2].Status.NodeInfo.BootID = "b1"
				w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns, "ForceDelete kube-system/etcd-0"},
		},
		{
			name: "S5 StatefulSet pod, node fenced with out-of-service: force delete",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
				w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionAct},
			reasons:   map[string]string{"etcd-0": "StatefulSet pod on fenced node node-2 (taint node.kubernetes.io/out-of-service): force delete (grace period 0) so that StatefulSet/etcd recreates it"},
			actions:   []string{"Delete kube-system/" + coredns, "ForceDelete kube-system/etcd-0"},
		},
		{
			name: "S5 StatefulSet pod already terminating (upstream evicted it): still force deleted once fenced",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
				terminating(w.pod("etcd-0", "node-2", "StatefulSet", "etcd"), at(20*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns, "ForceDelete kube-system/etcd-0"},
		},
		{
			name: "force delete already issued, held by finalizers: in flight",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
				p := w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr(metav1.NewTime(at(50*time.Second))), ptr(int64(0))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionInFlight},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.InFlight != 1 {
					t.Errorf("in flight = %d, want 1", r.InFlight)
				}
			},
		},
		{
			name: "fencing mode Never: report only, even when fenced",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Fencing.Mode = v1alpha1.Never
				w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
				w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionReportOnly},
			reasons:   map[string]string{"etcd-0": "fencing mode is Never"},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "Deployment pod with a ReadWriteOnce PVC is stateful",
			world: func() *world {
				w := s1(at(time.Minute))
				w.pvc("data", corev1.ReadWriteOnce)
				mountPVC(w.s.Pods[0], "data")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionWaitingForFencing},
			reasons: map[string]string{coredns: "Deployment/coredns pod with exclusive storage (PVC data is ReadWriteOnce): waiting for fencing; " +
				"add the node.kubernetes.io/out-of-service:NoExecute taint once the node is confirmed off"},
		},
		{
			name: "Deployment pod with a ReadWriteOncePod PVC, fenced: force delete",
			world: func() *world {
				w := s1(at(time.Minute))
				w.pvc("data", corev1.ReadWriteOncePod)
				mountPVC(w.s.Pods[0], "data")
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{outOfService()}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ForceDelete kube-system/" + coredns},
		},
		{
			name: "Deployment pod with a ReadWriteMany PVC stays stateless",
			world: func() *world {
				w := s1(at(time.Minute))
				w.pvc("shared", corev1.ReadWriteMany)
				mountPVC(w.s.Pods[0], "shared")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "PVC missing from the snapshot counts as ReadWriteOnce",
			world: func() *world {
				w := s1(at(time.Minute))
				mountPVC(w.s.Pods[0], "gone")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionWaitingForFencing},
			reasons:   map[string]string{coredns: "PVC gone is not in the snapshot"},
		},

		// Never touched, or nothing safe to do.
		{
			name: "DaemonSet and mirror pods are listed as Skip and never acted on",
			world: func() *world {
				w := s1(at(time.Minute))
				w.pod("kube-proxy-abc", "node-3", "DaemonSet", "kube-proxy")
				m := w.pod("kube-apiserver-node-3", "node-3", "", "")
				m.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
				m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-3", Controller: ptr(true)}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "kube-proxy-abc": DecisionSkip, "kube-apiserver-node-3": DecisionSkip},
			reasons: map[string]string{
				"kube-proxy-abc":        "DaemonSet pod (DaemonSet kube-proxy): never touched",
				"kube-apiserver-node-3": "mirror pod of a static pod: never touched",
			},
			actions: []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Critical != 3 || r.Stranded != 1 {
					t.Errorf("policy report = %+v, want 3 critical, 1 stranded", r)
				}
			},
		},
		{
			name: "Job pod, bare pod, unknown owner, missing ReplicaSet: report only",
			world: func() *world {
				w := s1(at(time.Minute))
				w.pod("backup-x", "node-3", "Job", "backup")
				w.pod("debug", "node-3", "", "")
				w.pod("legacy-x", "node-3", "ReplicationController", "legacy")
				w.pod("orphan-x", "node-3", "ReplicaSet", "orphan-1")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "backup-x": DecisionReportOnly, "debug": DecisionReportOnly,
				"legacy-x": DecisionReportOnly, "orphan-x": DecisionReportOnly},
			reasons: map[string]string{
				"backup-x": "owned by Job backup: the Job controller replaces lost pods itself; report only",
				"debug":    "no controller owner: nothing would recreate the pod if rebound deleted it; report only",
				"legacy-x": "owned by ReplicationController legacy: rebound rescues only ReplicaSet/Deployment and StatefulSet pods",
				"orphan-x": "ReplicaSet orphan-1 (uid uid-ReplicaSet-orphan-1) is not in the snapshot",
			},
			actions: []string{"Delete kube-system/" + coredns},
		},
	}

	runPlanCases(t, tests)
}

// runPlanCases runs each case, twice: the same snapshot must give the
// same plan (level-triggered, nothing remembered between calls). And
// PlanFor must leave its snapshot as it was: the controller hands it the
// informer cache's own objects, whose labels, owners and tolerations
// many pods share (internal/controller/shared.go), so one write would
// change other pods too.
func runPlanCases(t *testing.T, tests []planCase) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.world()
			before := cloneSnapshot(w.s)
			p := PlanFor(w.s)
			if !reflect.DeepEqual(before, w.s) {
				t.Error("PlanFor changed its snapshot")
			}
			checkPlan(t, tc, p)
			if again := PlanFor(w.s); !reflect.DeepEqual(p, again) {
				t.Errorf("second PlanFor differs:\nfirst  %+v\nsecond %+v", p, again)
			}
		})
	}
}

// cloneSnapshot copies every object and map of s.
func cloneSnapshot(s Snapshot) Snapshot {
	c := s
	c.Nodes = cloneAll(s.Nodes, (*corev1.Node).DeepCopy)
	c.Pods = cloneAll(s.Pods, (*corev1.Pod).DeepCopy)
	c.ReplicaSets = cloneAll(s.ReplicaSets, (*appsv1.ReplicaSet).DeepCopy)
	c.Deployments = cloneAll(s.Deployments, (*appsv1.Deployment).DeepCopy)
	c.PVCs = cloneAll(s.PVCs, (*corev1.PersistentVolumeClaim).DeepCopy)
	c.Policies = cloneAll(s.Policies, (*v1alpha1.RecoveryPolicy).DeepCopy)
	if s.Namespaces != nil {
		c.Namespaces = make(map[string]map[string]string, len(s.Namespaces))
		for k, v := range s.Namespaces {
			c.Namespaces[k] = maps.Clone(v)
		}
	}
	c.Verdicts = maps.Clone(s.Verdicts)
	c.LeaseRenewTimes = maps.Clone(s.LeaseRenewTimes)
	c.Usage = maps.Clone(s.Usage)
	c.RecentActions = slices.Clone(s.RecentActions)
	return c
}

func cloneAll[T any](in []*T, deepCopy func(*T) *T) []*T {
	if in == nil {
		return nil
	}
	out := make([]*T, len(in))
	for i, o := range in {
		out[i] = deepCopy(o)
	}
	return out
}

func checkPlan(t *testing.T, tc planCase, p Plan) {
	t.Helper()
	got := make(map[string]Decision, len(p.Critical))
	for _, c := range p.Critical {
		got[c.Name] = c.Decision
		if want, ok := tc.reasons[c.Name]; ok && !strings.Contains(c.Reason, want) {
			t.Errorf("pod %s reason:\n got  %q\n want it to contain %q", c.Name, c.Reason, want)
		}
	}
	if !reflect.DeepEqual(got, tc.decisions) {
		t.Errorf("decisions = %v, want %v", got, tc.decisions)
		for _, c := range p.Critical {
			t.Logf("  %s: %s: %s", c.Name, c.Decision, c.Reason)
		}
	}
	keys := make([]string, 0, len(p.Actions))
	for _, a := range p.Actions {
		k := a.Key()
		if a.DryRun {
			k += "+dry"
		}
		if a.Reason == "" {
			t.Errorf("action %s has no reason", k)
		}
		keys = append(keys, k)
	}
	if !slices.Equal(keys, tc.actions) {
		t.Errorf("actions = %q, want %q", keys, tc.actions)
	}
	if !p.NextCheck.Equal(tc.nextCheck) {
		t.Errorf("NextCheck = %v, want %v", p.NextCheck, tc.nextCheck)
	}
	if tc.check != nil {
		tc.check(t, p)
	}
}
