package diagnose

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/policyfile"
	"rebound/pkg/rescue"
)

// want is what a case checks; empty fields are not checked.
type want struct {
	blocking bool
	// zone is the first zone's state, rate its eviction rate.
	zone string
	rate float64
	// decisions maps "ns/pod" to the planner's decision.
	decisions map[string]rescue.Decision
	// upstream maps "ns/pod" to a prefix of the short upstream answer.
	upstream map[string]string
	// workloads maps "Kind ns/name" to its impact.
	workloads map[string]Impact
	// first is the first finding: its object, and words its cause or
	// rebound text must contain.
	firstObject string
	firstWords  []string
	// words must appear somewhere in the JSON of the report.
	words []string
	// absent must not.
	absent []string
}

func TestExplain(t *testing.T) {
	cases := []struct {
		name  string
		world func() *world
		want  want
	}{{
		name: "healthy cluster: nothing to say",
		world: func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(5)
			w.deployment("kube-system", "coredns", true, 2, "node-0", "node-1")
			w.policy()
			return w
		},
		want: want{zone: "Normal", rate: 0.1, words: []string{`"findings": []`, `"workloads": []`, `"criticalPods": []`, `"status": "NotManaged"`, "nothing blocks recovery"}},
	}, {
		name:  "S1: PartialDisruption strands a critical pod, rebound deletes it",
		world: func() *world { return s1(at(45 * time.Second)) },
		want: want{
			blocking:    true,
			zone:        "PartialDisruption",
			rate:        0,
			decisions:   map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionAct},
			upstream:    map[string]string{"kube-system/calico-kube-controllers-5d4f-x0": "never: zone r1/z1 in PartialDisruption"},
			workloads:   map[string]Impact{"Deployment kube-system/calico-kube-controllers": ImpactBlocking},
			firstObject: "Deployment kube-system/calico-kube-controllers",
			firstWords: []string{"0/1 available: its only pod calico-kube-controllers-5d4f-x0 is on NotReady node node-3 (zone r1/z1 PartialDisruption)",
				"upstream eviction never", "Act Delete under policy default", "delete it so that ReplicaSet calico-kube-controllers-5d4f creates a replacement"},
			words: []string{"4 of 5 nodes NotReady: more than 2 and 0.80 >= --unhealthy-zone-threshold 0.55",
				"<= --large-cluster-size-threshold 50", `"upstreamEviction": null`, `"stranded": true`},
		},
	}, {
		name:  "S1 before maxUnavailableTime: rebound acts at the deadline, pending",
		world: func() *world { return s1(at(10 * time.Second)) },
		want: want{
			zone:        "PartialDisruption",
			decisions:   map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionNotYet},
			workloads:   map[string]Impact{"Deployment kube-system/calico-kube-controllers": ImpactPending},
			firstObject: "Deployment kube-system/calico-kube-controllers",
			firstWords:  []string{"NotYet under policy default", "stranded at 2026-03-01T12:00:30Z if still NotReady"},
		},
	}, {
		name: "S1 with a workload no policy selects: blocked, rebound leaves it alone",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.deployment("default", "not-critical", false, 0, "node-3")
			return w
		},
		want: want{
			blocking:  true,
			workloads: map[string]Impact{"Deployment default/not-critical": ImpactBlocking, "Deployment kube-system/calico-kube-controllers": ImpactBlocking},
			words:     []string{"no RecoveryPolicy makes it critical, so rebound leaves it alone"},
			absent:    []string{"default/not-critical-5d4f-x0\""},
		},
	}, {
		name:  "S5: StatefulSet pod with a ReadWriteOnce volume waits for fencing",
		world: func() *world { return s5(at(45 * time.Second)) },
		want: want{
			blocking:    true,
			zone:        "Normal",
			rate:        0.1,
			decisions:   map[string]rescue.Decision{"kube-system/etcd-standin-0": rescue.DecisionWaitingForFencing},
			upstream:    map[string]string{"kube-system/etcd-standin-0": "at 2026-03-01T12:05:55Z"},
			workloads:   map[string]Impact{"StatefulSet kube-system/etcd-standin": ImpactBlocking},
			firstObject: "StatefulSet kube-system/etcd-standin",
			firstWords:  []string{"StatefulSet pod: waiting for fencing; add the node.kubernetes.io/out-of-service:NoExecute taint once the node is confirmed off"},
		},
	}, {
		name: "S5 fenced: rebound force-deletes",
		world: func() *world {
			w := s5(at(45 * time.Second))
			n := w.nodeNamed("node-3")
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
			return w
		},
		want: want{
			blocking:  true,
			decisions: map[string]rescue.Decision{"kube-system/etcd-standin-0": rescue.DecisionAct},
			words:     []string{`"action": "ForceDelete"`, "on fenced node node-3"},
		},
	}, {
		name: "S5 with the StatefulSet pod already evicted: Terminating, the StatefulSet waits",
		world: func() *world {
			w := s5(at(45 * time.Second))
			p := w.s.Pods[len(w.s.Pods)-1]
			p.DeletionTimestamp = ptr(metav1.NewTime(at(40 * time.Second)))
			p.DeletionGracePeriodSeconds = ptr(int64(30))
			return w
		},
		want: want{
			blocking:  true,
			workloads: map[string]Impact{"StatefulSet kube-system/etcd-standin": ImpactBlocking},
			words:     []string{"is Terminating on NotReady node node-3", "creates no replacement while it exists"},
		},
	}, {
		name: "S3: upstream evicts in time, left to it",
		world: func() *world {
			w := newWorld(at(15 * time.Second))
			w.cluster(5, 3)
			w.nodeNamed("node-3").Spec.Taints = []corev1.Taint{noExecute(corev1.TaintNodeUnreachable, at(5*time.Second))}
			pods := w.deployment("kube-system", "coredns", true, 0, "node-3")
			pods[0].Spec.Tolerations = tolerations(20)
			w.policy()
			return w
		},
		want: want{
			decisions: map[string]rescue.Decision{"kube-system/coredns-5d4f-x0": rescue.DecisionLeftToUpstream},
			upstream:  map[string]string{"kube-system/coredns-5d4f-x0": "at 2026-03-01T12:00:25Z (in 10s)"},
			workloads: map[string]Impact{"Deployment kube-system/coredns": ImpactPending},
		},
	}, {
		name: "rescue done: the old pod Terminating, the Deployment available again",
		world: func() *world {
			w := s1(at(2 * time.Minute))
			p := w.s.Pods[0]
			p.DeletionTimestamp = ptr(metav1.NewTime(at(61 * time.Second)))
			p.DeletionGracePeriodSeconds = ptr(int64(30))
			w.s.Deployments[0].Status.AvailableReplicas = 1
			w.s.ReplicaSets[0].Status.AvailableReplicas = 1
			w.pod("kube-system", "calico-kube-controllers-5d4f-y9", "node-0", true, "ReplicaSet", "calico-kube-controllers-5d4f")
			return w
		},
		want: want{
			decisions:   map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionReplaced},
			firstObject: "Pod kube-system/calico-kube-controllers-5d4f-x0",
			firstWords:  []string{"Replaced", "rescue complete"},
			words:       []string{`"workloads": []`},
		},
	}, {
		name: "evicted by kube-controller-manager (its taint and the toleration made it due), replaced: not credited to rebound",
		world: func() *world {
			w := replacedS1(corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"})
			w.nodeNamed("node-3").Spec.Taints = []corev1.Taint{noExecute(corev1.TaintNodeUnreachable, t0)}
			w.s.Pods[0].Spec.Tolerations = tolerations(20)
			return w
		},
		want: want{
			decisions:   map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionReplaced},
			firstObject: "Pod kube-system/calico-kube-controllers-5d4f-x0",
			firstWords: []string{"Replaced", "evicted by kube-controller-manager's taint eviction", "nothing for rebound to do",
				"deleted by kube-controller-manager's taint eviction", "the eviction was due at 2026-03-01T12:00:20Z, the deletion requested at 2026-03-01T12:00:31Z"},
			words:  []string{`"actor": "TaintEviction"`, "its DisruptionTarget condition says so too"},
			absent: []string{"rescue complete"},
		},
	}, {
		name: "kube-controller-manager's DisruptionTarget condition alone, its taint not due: not claimed for it",
		world: func() *world {
			return replacedS1(corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"})
		},
		want: want{
			decisions:   map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionReplaced},
			firstObject: "Pod kube-system/calico-kube-controllers-5d4f-x0",
			firstWords:  []string{"deleted by not rebound (upstream taint eviction or another actor)"},
			words:       []string{`"actor": "NotRebound"`, "the condition is also set on a pod already Terminating"},
			absent:      []string{"evicted by kube-controller-manager", `"actor": "TaintEviction"`},
		},
	}, {
		name: "rebound's status.lastActions names the delete; kube-controller-manager's condition came after: rebound",
		world: func() *world {
			w := replacedS1(corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"})
			w.nodeNamed("node-3").Spec.Taints = []corev1.Taint{noExecute(corev1.TaintNodeUnreachable, t0)}
			w.s.Policies[0].Status.LastActions = []v1alpha1.ActionRecord{{Time: metav1.NewTime(at(31 * time.Second)),
				Action: v1alpha1.RecordedDeleteAndReplace, Pod: "kube-system/calico-kube-controllers-5d4f-x0", Node: "node-3", Result: rescue.ResultSucceeded}}
			return w
		},
		want: want{
			decisions:   map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionReplaced},
			firstObject: "Pod kube-system/calico-kube-controllers-5d4f-x0",
			firstWords:  []string{"deleted by rebound", "RecoveryPolicy default status.lastActions (DeleteAndReplace) at 2026-03-01T12:00:31Z", "rescue complete"},
			words:       []string{`"actor": "rebound"`},
			absent:      []string{"evicted by kube-controller-manager", "TaintEviction"},
		},
	}, {
		name: "a record of rebound's for an earlier pod of the same name, a dry run, a refused delete: not credited",
		world: func() *world {
			w := replacedS1()
			rec := func(t time.Time, dry bool, result string) v1alpha1.ActionRecord {
				return v1alpha1.ActionRecord{Time: metav1.NewTime(t), Action: v1alpha1.RecordedDeleteAndReplace,
					Pod: "kube-system/calico-kube-controllers-5d4f-x0", DryRun: dry, Result: result}
			}
			w.s.Policies[0].Status.LastActions = []v1alpha1.ActionRecord{
				rec(at(31*time.Second), true, rescue.ResultSucceeded), rec(at(31*time.Second), false, rescue.ResultRefused),
				rec(at(-2*time.Hour), false, rescue.ResultSucceeded)}
			return w
		},
		want: want{
			words:  []string{`"actor": "NotRebound"`},
			absent: []string{`"actor": "rebound"`},
		},
	}, {
		name: "rebound deleted the pod of a Deployment still short: the workload's cause says so",
		world: func() *world {
			w := s1(at(45 * time.Second))
			p := w.s.Pods[0]
			p.DeletionTimestamp = ptr(metav1.NewTime(at(61 * time.Second)))
			p.DeletionGracePeriodSeconds = ptr(int64(30))
			w.x.DeleteRecords = []rescue.DeleteRecord{{Namespace: "kube-system", Pod: p.Name, UID: p.UID, At: at(31 * time.Second), Source: "Event StrandedPodDeleted"}}
			return w
		},
		want: want{
			firstObject: "Deployment kube-system/calico-kube-controllers",
			firstWords:  []string{"is Terminating on NotReady node node-3", "deleted by rebound", "Event StrandedPodDeleted at 2026-03-01T12:00:31Z"},
		},
	}, {
		name: "DaemonSet pods on NotReady nodes are only information",
		world: func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(5, 3, 4)
			w.daemonSet("calico-node", 3, "node-0", "node-1", "node-2", "node-3", "node-4")
			w.policy()
			return w
		},
		want: want{
			decisions: map[string]rescue.Decision{"kube-system/calico-node-node-3": rescue.DecisionSkip},
			workloads: map[string]Impact{"DaemonSet kube-system/calico-node": ImpactInfo},
			words:     []string{"2 of its pods are on NotReady nodes (node-3, node-4): DaemonSet pods stay with their node"},
		},
	}, {
		name: "unschedulable replacement blocks",
		world: func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(3)
			pods := w.deployment("default", "web", false, 0, "")
			pods[0].Status.Conditions = append(pods[0].Status.Conditions, corev1.PodCondition{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 3 Insufficient cpu.\n preemption: 0/3 nodes are available.", LastTransitionTime: metav1.NewTime(t0),
			})
			return w
		},
		want: want{
			blocking:  true,
			workloads: map[string]Impact{"Deployment default/web": ImpactBlocking},
			words:     []string{"pod web-5d4f-x0 cannot be scheduled: 0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."},
		},
	}, {
		name: "crash loop on a Ready node blocks",
		world: func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(3)
			pods := w.deployment("default", "web", false, 0, "node-1")
			pods[0].Status.Conditions[0].Status = corev1.ConditionFalse
			pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}}}}
			return w
		},
		want: want{
			blocking:  true,
			workloads: map[string]Impact{"Deployment default/web": ImpactBlocking},
			words:     []string{"pod web-5d4f-x0 on node node-1: container main is CrashLoopBackOff: back-off 5m0s restarting failed container"},
		},
	}, {
		name: "scale bounce under way is pending",
		world: func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(3)
			w.deployment("kube-system", "coredns", true, 0)
			w.s.Deployments[0].Annotations = map[string]string{rescue.ScaleBounceAnnotation: "2"}
			w.s.Deployments[0].Spec.Replicas = ptr(int32(0))
			w.policy()
			return w
		},
		want: want{
			workloads: map[string]Impact{"Deployment kube-system/coredns": ImpactPending},
			words:     []string{"scaled to 0 by rebound's scale bounce, 2 replicas to restore"},
		},
	}, {
		name: "suspended policy: stranded and nobody acts",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.s.Policies[0].Spec.Suspend = true
			return w
		},
		want: want{
			blocking:  true,
			decisions: map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionSuspended},
			words:     []string{"policy default is suspended"},
		},
	}, {
		name: "dry-run policy: the action is only planned",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.s.Policies[0].Spec.DryRun = true
			return w
		},
		want: want{
			blocking:  true,
			decisions: map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionAct},
			words:     []string{`"dryRun": true`, "Act Delete (dry run)"},
		},
	}, {
		name: "no CRD: the built-in default policy, said so",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.x.BuiltInPolicy = true
			w.x.Warnings = []string{"the RecoveryPolicy CRD (recoverypolicies.rebound.dev) is not installed"}
			return w
		},
		want: want{blocking: true, words: []string{`"source": "built-in"`, "is not installed"}},
	}, {
		name: "no policy at all: warned, nothing critical",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.s.Policies = nil
			return w
		},
		want: want{
			blocking:  true,
			workloads: map[string]Impact{"Deployment kube-system/calico-kube-controllers": ImpactBlocking},
			words:     []string{"no RecoveryPolicy exists", "no RecoveryPolicy makes it critical"},
		},
	}, {
		name: "every zone FullDisruption: upstream taints nothing",
		world: func() *world {
			w := newWorld(at(45 * time.Second))
			w.cluster(3, 0, 1, 2)
			w.deployment("kube-system", "coredns", true, 0, "node-1")
			w.policy()
			return w
		},
		want: want{
			blocking:  true,
			zone:      "FullDisruption",
			upstream:  map[string]string{"kube-system/coredns-5d4f-x0": "never: every zone is FullDisruption"},
			decisions: map[string]rescue.Decision{"kube-system/coredns-5d4f-x0": rescue.DecisionHeld},
			words: []string{`"fullDisruptionMode": true`, `"held": 1`,
				"every node is NotReady (3 of 3): like kube-controller-manager in full disruption, rebound evicts nothing"},
		},
	}, {
		name: "S1 with the only Ready node cordoned: no target, nothing deleted",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.nodeNamed("node-0").Spec.Unschedulable = true
			return w
		},
		want: want{
			blocking:  true,
			zone:      "PartialDisruption",
			decisions: map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionNoTarget},
			words:     []string{"no Ready node can run the replacement (cordoned (spec.unschedulable): node-0; NotReady: 4 node(s))", `"noTarget": 1`},
		},
	}, {
		name: "S1 with BGP evidence that the node is alive: shown, the stateless pod held, not stranded",
		world: func() *world {
			w := s1(at(45 * time.Second))
			w.s.Verdicts = map[string]liveness.NodeVerdict{"node-3": {Verdict: liveness.CutOffFromAPI, Reason: "node-2 reports a BGP session Established with it"}}
			return w
		},
		want: want{
			blocking:  true,
			zone:      "PartialDisruption",
			decisions: map[string]rescue.Decision{"kube-system/calico-kube-controllers-5d4f-x0": rescue.DecisionHeld},
			words: []string{`"nodeAlive": "node-2 reports a BGP session Established with it"`,
				"yet a witness that reaches the API sees it alive (cut off from the API, not dead: node-2 reports a BGP session Established with it): a node seen alive is not stranded"},
		},
	}, {
		name: "S4: a returned node waits for a dead peer still in the set",
		world: func() *world {
			w := newWorld(at(20 * time.Second))
			w.cluster(3, 1, 2)
			w.nodeNamed("node-0").Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(15 * time.Second))
			w.nodeNamed("node-1").Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(-2 * time.Minute))
			w.inSet("node-0", "true")
			w.inSet("node-1", "false")
			w.inSet("node-2", "true")
			w.report("node-0", at(18*time.Second), map[string]string{"node-2": "Active"})
			w.report("node-1", at(-3*time.Minute), map[string]string{"node-0": "Established", "node-2": "Established"})
			return w
		},
		want: want{
			blocking:    true,
			firstObject: "Node node-0",
			firstWords: []string{"BIRD on node-0 has no session with node-2 (Active), which is NotReady since 2026-03-01T12:00:00Z but still in the peer set (InGracePeriod",
				"node-0 became Ready 5s ago, so its BIRD is likely in graceful-restart recovery and programs no routes until node-2 leaves the set",
				"leaves it out of the set when its prune grace period ends"},
			words: []string{`"status": "Reported"`, `"reason": "NotReadyPastGrace"`, "left out of the mesh after the prune grace period",
				`"since": "2026-03-01T12:00:15Z"`, `"stale": true`},
		},
	}, {
		name: "S4 after pruning: the dead peer is left out, nothing waits",
		world: func() *world {
			w := newWorld(at(2 * time.Minute))
			w.cluster(3, 1, 2)
			w.inSet("node-0", "true")
			w.inSet("node-1", "false")
			w.inSet("node-2", "false")
			w.report("node-0", at(110*time.Second), map[string]string{})
			return w
		},
		want: want{
			words:  []string{`"leftOut": [`, "left out of the BGP peer set (NotReadyPastGrace)"},
			absent: []string{"BGPPeerWait"},
		},
	}, {
		name: "peer set labels without agent reports",
		world: func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(3)
			w.inSet("node-0", "true")
			return w
		},
		want: want{words: []string{`"status": "NoReports"`, "no agent reports BGP sessions"}},
	}, {
		name: "keep-in-mesh label holds a dead node in the set",
		world: func() *world {
			w := newWorld(at(5 * time.Minute))
			w.cluster(3, 2)
			w.nodeNamed("node-2").Labels["peering.rebound.dev/keep-in-mesh"] = "true"
			w.inSet("node-0", "true")
			w.inSet("node-1", "true")
			w.inSet("node-2", "true")
			w.nodeNamed("node-0").Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(280 * time.Second))
			w.report("node-0", at(290*time.Second), map[string]string{"node-1": "Established", "node-2": "Connect"})
			return w
		},
		want: want{
			blocking:    true,
			firstObject: "Node node-0",
			firstWords:  []string{"KeepInMeshLabel", "remove the label once the node is confirmed off"},
		},
	}, {
		name: "a node up since before its peer died is not held by it: pending",
		world: func() *world {
			w := newWorld(at(20 * time.Second))
			w.cluster(3, 2)
			w.nodeNamed("node-0").Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(-10 * time.Second))
			for _, n := range []string{"node-0", "node-1", "node-2"} {
				w.inSet(n, "true")
			}
			w.report("node-0", at(18*time.Second), map[string]string{"node-1": "Established", "node-2": "Active"})
			return w
		},
		want: want{
			firstObject: "Node node-0",
			firstWords:  []string{"a BIRD that restarts now waits for it in graceful-restart recovery"},
		},
	}, {
		name: "a Ready node's stale report is information",
		world: func() *world {
			w := newWorld(at(10 * time.Minute))
			w.cluster(3)
			w.inSet("node-0", "true")
			w.report("node-0", at(time.Minute), map[string]string{"node-1": "Established"})
			return w
		},
		want: want{words: []string{"BGPReport", "is `rebound agent` running on node-0?"}},
	}}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.world().explain()
			var buf bytes.Buffer
			if err := WriteJSON(&buf, r); err != nil {
				t.Fatal(err)
			}
			js := buf.String()
			w := tc.want
			if r.Blocking != w.blocking {
				t.Errorf("Blocking = %v, want %v; findings:\n%s", r.Blocking, w.blocking, findingsText(r))
			}
			if r.SchemaVersion != SchemaVersion {
				t.Errorf("schemaVersion = %d", r.SchemaVersion)
			}
			if w.zone != "" {
				if len(r.Zones) == 0 || r.Zones[0].State != w.zone || r.Zones[0].EvictionRate != w.rate {
					t.Errorf("zones = %+v, want first %s at rate %g", r.Zones, w.zone, w.rate)
				}
			}
			for key, d := range w.decisions {
				cp := findCritical(r, key)
				if cp == nil || cp.Decision != string(d) {
					t.Errorf("critical pod %s = %+v, want decision %s", key, cp, d)
				}
			}
			for key, prefix := range w.upstream {
				cp := findCritical(r, key)
				if cp == nil || !strings.HasPrefix(cp.Upstream, prefix) {
					t.Errorf("critical pod %s upstream = %+v, want prefix %q", key, cp, prefix)
				}
			}
			for key, imp := range w.workloads {
				i := slices.IndexFunc(r.Workloads, func(wl Workload) bool { return wl.Kind+" "+wl.Namespace+"/"+wl.Name == key })
				if i < 0 || r.Workloads[i].Impact != imp {
					t.Errorf("workload %s: want impact %s; workloads %+v", key, imp, r.Workloads)
				}
			}
			if len(r.Workloads) > len(w.workloads) && w.workloads != nil {
				t.Errorf("workloads = %+v, want only %v", r.Workloads, w.workloads)
			}
			if w.firstObject != "" {
				if len(r.Findings) == 0 || r.Findings[0].Object != w.firstObject {
					t.Fatalf("first finding is not about %s:\n%s", w.firstObject, findingsText(r))
				}
				f := r.Findings[0]
				for _, word := range w.firstWords {
					if !strings.Contains(f.Cause+" | "+f.Rebound, word) {
						t.Errorf("first finding lacks %q:\n%s | %s", word, f.Cause, f.Rebound)
					}
				}
			}
			for _, word := range w.words {
				if !strings.Contains(js, word) {
					t.Errorf("report lacks %q:\n%s", word, js)
				}
			}
			for _, word := range w.absent {
				if strings.Contains(js, word) {
					t.Errorf("report has %q:\n%s", word, js)
				}
			}
			for i := 1; i < len(r.Findings); i++ {
				if compareFindings(r.Findings[i-1], r.Findings[i]) > 0 {
					t.Errorf("findings not ranked: %+v before %+v", r.Findings[i-1], r.Findings[i])
				}
			}
		})
	}
}

// replacedS1 is S1 after the critical pod was deleted (requested at t0+31s,
// grace 30 s) and replaced: its Deployment available again, the old pod
// Terminating on node-3 with conds.
func replacedS1(conds ...corev1.PodCondition) *world {
	w := s1(at(2 * time.Minute))
	p := w.s.Pods[0]
	p.DeletionTimestamp = ptr(metav1.NewTime(at(61 * time.Second)))
	p.DeletionGracePeriodSeconds = ptr(int64(30))
	p.Status.Conditions = append(p.Status.Conditions, conds...)
	w.s.Deployments[0].Status.AvailableReplicas = 1
	w.s.ReplicaSets[0].Status.AvailableReplicas = 1
	w.pod("kube-system", "calico-kube-controllers-5d4f-y9", "node-0", true, "ReplicaSet", "calico-kube-controllers-5d4f")
	return w
}

// TestExplainIsPure: the same input gives the same report, and Explain does
// not modify its input.
func TestExplainIsPure(t *testing.T) {
	s1w := s1(at(45 * time.Second))
	s1w.deployment("default", "not-critical", false, 0, "node-3")
	s1w.daemonSet("calico-node", 1, "node-0", "node-3")
	// The planner is handed this pod without its condition: a copy.
	replaced := replacedS1(corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"})
	for _, w := range []*world{s1w, replaced} {
		before, err := json.Marshal([]any{w.s.Nodes, w.s.Pods, w.s.Policies, w.x.DaemonSets})
		if err != nil {
			t.Fatal(err)
		}
		a, b := w.explain(), w.explain()
		if !reflect.DeepEqual(a, b) {
			t.Errorf("two runs differ:\n%+v\n%+v", a, b)
		}
		after, _ := json.Marshal([]any{w.s.Nodes, w.s.Pods, w.s.Policies, w.x.DaemonSets})
		if string(before) != string(after) {
			t.Error("Explain modified its input")
		}
	}
}

// TestExplainReusesThePlanner: the critical pods' decisions and reasons
// are rescue.PlanFor's, word for word.
func TestExplainReusesThePlanner(t *testing.T) {
	for _, w := range []*world{s1(at(45 * time.Second)), s5(at(45 * time.Second)), s1(at(5 * time.Second))} {
		plan := rescue.PlanFor(w.s)
		r := w.explain()
		if len(r.CriticalPods) != len(plan.Critical) {
			t.Fatalf("%d critical pods, plan has %d", len(r.CriticalPods), len(plan.Critical))
		}
		for i, cp := range plan.Critical {
			got := r.CriticalPods[i]
			if got.Decision != string(cp.Decision) || got.Reason != cp.Reason || got.UpstreamReason != cp.UpstreamReason || got.Stranded != cp.Stranded {
				t.Errorf("pod %s: got %+v, plan %+v", cp.Key(), got, cp)
			}
		}
	}
}

// TestEveryPodPolicyIsValid: the helper policy that gives upstream's answer
// for non-critical pods must compile, or it would silently select nothing.
func TestEveryPodPolicyIsValid(t *testing.T) {
	for _, p := range []*v1alpha1.RecoveryPolicy{everyPodPolicy(), policyfile.Default()} {
		if errs := p.Validate(); len(errs) > 0 {
			t.Errorf("%s: %v", p.Name, errs)
		}
	}
}

func findCritical(r Report, key string) *CriticalPod {
	for i := range r.CriticalPods {
		if r.CriticalPods[i].Namespace+"/"+r.CriticalPods[i].Name == key {
			return &r.CriticalPods[i]
		}
	}
	return nil
}

func findingsText(r Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString(string(f.Impact) + " " + f.Object + ": " + f.Cause + " | " + f.Rebound + "\n")
	}
	return b.String()
}

// TestExplainLiveness: the verdict on each NotReady node is in the report
// and its text, and Ready nodes are not listed.
func TestExplainLiveness(t *testing.T) {
	w := s1(at(45 * time.Second))
	w.s.Verdicts = map[string]liveness.NodeVerdict{
		"node-0": {Verdict: liveness.Alive},
		"node-3": {Verdict: liveness.Unknown, Since: w.s.Now.Add(-45 * time.Second), Observers: 2, DownVotes: 1, Reason: "1 of 2 fresh Ready observers report its sessions down, short of the quorum of 2"},
	}
	r := Explain(w.s, w.x)
	if len(r.Liveness) != 1 || r.Liveness[0].Node != "node-3" || r.Liveness[0].Verdict != "Unknown" {
		t.Fatalf("liveness = %+v, want node-3 Unknown only", r.Liveness)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "node-3: Unknown, NotReady since") || !strings.Contains(buf.String(), "short of the quorum of 2") {
		t.Errorf("text lacks the verdict:\n%s", buf.String())
	}
}
