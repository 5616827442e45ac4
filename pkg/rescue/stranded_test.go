package rescue

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/zone"
)

func TestTolerationFor(t *testing.T) {
	exists := func(key string, effect corev1.TaintEffect, seconds *int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect, TolerationSeconds: seconds}
	}
	tests := []struct {
		name        string
		tolerations []corev1.Toleration
		want        time.Duration
		tolerated   bool
		forever     bool
	}{
		{name: "none: evicted at once", tolerations: nil},
		{name: "other key", tolerations: []corev1.Toleration{exists("example.com/gpu", "", nil)}},
		{name: "NoSchedule only", tolerations: []corev1.Toleration{exists(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule, nil)}},
		{name: "default 300s", tolerations: defaultTolerations(ptr(int64(300))), want: 300 * time.Second, tolerated: true},
		{name: "without seconds: forever", tolerations: defaultTolerations(nil), tolerated: true, forever: true},
		{name: "empty key with Exists matches every taint, empty effect every effect", tolerations: []corev1.Toleration{exists("", "", nil)}, tolerated: true, forever: true},
		{
			name:        "shortest of several wins; one without seconds does not make it forever",
			tolerations: []corev1.Toleration{exists(corev1.TaintNodeUnreachable, "", nil), exists(corev1.TaintNodeUnreachable, "", ptr(int64(60))), exists("", "", ptr(int64(20)))},
			want:        20 * time.Second, tolerated: true,
		},
		{name: "negative seconds mean 0", tolerations: []corev1.Toleration{exists(corev1.TaintNodeUnreachable, "", ptr(int64(-5)))}, tolerated: true},
		{
			name:        "Equal with a value does not match the valueless taint",
			tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpEqual, Value: "x", Effect: corev1.TaintEffectNoExecute}},
		},
		{
			name:        "Equal without a value (operator defaulted) matches",
			tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(5))}},
			want:        5 * time.Second, tolerated: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tolerations}}
			d, tolerated, forever := tolerationFor(pod, corev1.TaintNodeUnreachable, "")
			if d != tc.want || tolerated != tc.tolerated || forever != tc.forever {
				t.Errorf("tolerationFor = %v, %v, %v; want %v, %v, %v", d, tolerated, forever, tc.want, tc.tolerated, tc.forever)
			}
		})
	}
}

// TestEvictionQueuePosition checks that untainted nodes wait their turn in
// the zone's queue (oldest NotReady first) while tainted ones are not
// counted ahead, and that Ready=False picks the not-ready taint.
func TestEvictionQueuePosition(t *testing.T) {
	w := newWorld(at(time.Second))
	w.zoneOf("z1", 20, 0)
	w.node("first", "z1", corev1.ConditionUnknown, at(-2*time.Second))
	w.node("tainted", "z1", corev1.ConditionUnknown, at(-3*time.Second), noExecute(corev1.TaintNodeUnreachable, at(-time.Second)))
	w.node("second-b", "z1", corev1.ConditionFalse, t0)
	w.node("second-a", "z1", corev1.ConditionUnknown, t0)

	infos, notReady, _ := indexNodes(w.s.Nodes, nil, nil)
	zones := zone.Evaluate(infos, zone.DefaultConfig())
	for name, ahead := range map[string]int{"first": 0, "second-a": 1, "second-b": 2} {
		if got := notReady[name].ahead; got != ahead {
			t.Errorf("%s: ahead = %d, want %d", name, got, ahead)
		}
	}

	pod := &corev1.Pod{}
	ev := evictionFor(pod, notReady["second-b"], &zones, w.s.Now)
	// Normal zone at 0.1/s, 2 ahead: (2+1)/0.1 + 0.1 s from now.
	if want := at(time.Second + 30*time.Second + 100*time.Millisecond); !ev.at.Equal(want) || !ev.estimated {
		t.Errorf("second-b eviction = %v (estimated %v), want %v", ev.at, ev.estimated, want)
	}
	if !strings.Contains(ev.reason, corev1.TaintNodeNotReady+" expected by") {
		t.Errorf("reason %q should name the not-ready taint (Ready=False)", ev.reason)
	}
	if ev := evictionFor(pod, notReady["tainted"], &zones, w.s.Now); !ev.at.Equal(at(-time.Second)) || ev.estimated {
		t.Errorf("tainted eviction = %v (estimated %v), want the taint's time", ev.at, ev.estimated)
	}
}

// TestEvictionTaintWithoutTime: a taint without timeAdded starts the clock
// no earlier than now.
func TestEvictionTaintWithoutTime(t *testing.T) {
	taint := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: defaultTolerations(ptr(int64(60)))}}
	now := at(10 * time.Second)
	if ev := evictionByTaints(pod, []*corev1.Taint{&taint}, now); !ev.at.Equal(now.Add(time.Minute)) {
		t.Errorf("eviction = %v, want %v", ev.at, now.Add(time.Minute))
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		build     func(w *world) *corev1.Pod
		class     WorkloadClass
		workload  string
		whySubstr string
	}{
		{
			name:     "Deployment pod",
			build:    func(w *world) *corev1.Pod { return w.deploymentPod("web", "n", 1, 0) },
			class:    ClassStateless,
			workload: "Deployment/web",
		},
		{
			name: "bare ReplicaSet pod",
			build: func(w *world) *corev1.Pod {
				_, rs := w.deployment("kube-system", "web", 1, 0)
				rs.OwnerReferences = nil
				return w.pod("web-x", "n", "ReplicaSet", rs.Name)
			},
			class:    ClassStateless,
			workload: "ReplicaSet/web-5d4f",
		},
		{
			name: "ReplicaSet recreated under the same name: not the owner",
			build: func(w *world) *corev1.Pod {
				_, rs := w.deployment("kube-system", "web", 1, 0)
				rs.UID = "new-uid"
				return w.pod("web-x", "n", "ReplicaSet", rs.Name)
			},
			class:     ClassOwnerNotFound,
			whySubstr: "ReplicaSet web-5d4f (uid uid-ReplicaSet-web-5d4f) is not in the snapshot",
		},
		{
			name: "Deployment gone",
			build: func(w *world) *corev1.Pod {
				p := w.deploymentPod("web", "n", 1, 0)
				w.s.Deployments = nil
				return p
			},
			class:     ClassOwnerNotFound,
			whySubstr: "Deployment web (uid uid-Deployment-web) of ReplicaSet web-5d4f is not in the snapshot",
		},
		{
			name: "generic ephemeral ReadWriteOnce volume, claim not created yet",
			build: func(w *world) *corev1.Pod {
				p := w.deploymentPod("web", "n", 1, 0)
				p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
					VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}}}
				return p
			},
			class:     ClassStateful,
			workload:  "Deployment/web",
			whySubstr: "PVC web-5d4f-x1-scratch is ReadWriteOnce",
		},
		{
			name: "emptyDir and configMap volumes do not make a pod stateful",
			build: func(w *world) *corev1.Pod {
				p := w.deploymentPod("web", "n", 1, 0)
				p.Spec.Volumes = []corev1.Volume{
					{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				}
				return p
			},
			class:    ClassStateless,
			workload: "Deployment/web",
		},
		{
			name: "DaemonSet pod with a ReadWriteOnce PVC is still never touched",
			build: func(w *world) *corev1.Pod {
				p := w.pod("agent-x", "n", "DaemonSet", "agent")
				w.pvc("data", corev1.ReadWriteOnce)
				mountPVC(p, "data")
				return p
			},
			class:    ClassDaemonSet,
			workload: "DaemonSet/agent",
		},
		{
			name: "bare pod with a ReadWriteOnce PVC: nothing would recreate it",
			build: func(w *world) *corev1.Pod {
				p := w.pod("debug", "n", "", "")
				w.pvc("data", corev1.ReadWriteOnce)
				mountPVC(p, "data")
				return p
			},
			class:    ClassNoController,
			workload: "(no controller)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t0)
			pod := tc.build(w)
			idx := indexOwners(&w.s, []examined{{pod: pod}})
			got, _ := classify(pod, &idx)
			if got.Class != tc.class || (tc.workload != "" && got.String() != tc.workload) || !strings.Contains(got.Why, tc.whySubstr) {
				t.Errorf("classify = %+v (%s), want class %s, workload %q, why containing %q", got, got, tc.class, tc.workload, tc.whySubstr)
			}
		})
	}
}
