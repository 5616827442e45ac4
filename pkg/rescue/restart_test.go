package rescue

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/api/v1alpha1"
)

// fakeApply applies a plan's actions to the world the way the controller
// does (recording each in the policy's status.lastActions), and returns how
// many API changes it made.
func fakeApply(t *testing.T, w *world, p Plan) int {
	t.Helper()
	changes := 0
	for _, a := range p.Actions {
		if a.DryRun {
			continue
		}
		changes++
		switch a.Kind {
		case ActionDelete:
			for _, pod := range w.s.Pods {
				if pod.UID == a.UID {
					terminating(pod, w.s.Now)
				}
			}
		case ActionScaleDown, ActionScaleRestore:
			for _, d := range w.s.Deployments {
				if d.UID != a.UID {
					continue
				}
				if result, why := a.ChangeDeployment(d); result != "" {
					t.Fatalf("%s: %s: %s", a.Key(), result, why)
				}
			}
		default:
			t.Fatalf("unexpected action %s", a.Key())
		}
		for _, pol := range w.s.Policies {
			if pol.Name == a.Policy {
				pol.Status.LastActions = PrependRecords(pol.Status.LastActions, a.Record(w.s.Now, ResultSucceeded))
			}
		}
	}
	return changes
}

// TestRestartRepeatsNothing walks S1 through a whole rescue, restarting the
// "controller" (a fresh PlanFor with no memory) at every step, including
// between the two halves of the scale bounce. Every action happens exactly
// once.
func TestRestartRepeatsNothing(t *testing.T) {
	w := s1(t0)
	steps := []struct {
		at   time.Duration
		want []string
	}{
		{10 * time.Second, nil},
		{31 * time.Second, []string{"Delete kube-system/coredns-5d4f-x1"}},
		{32 * time.Second, nil}, // restart: the pod is terminating
		{60 * time.Second, nil},
		{92 * time.Second, []string{"ScaleDown kube-system/coredns"}},
		// crash here: the annotation carries the count
		{93 * time.Second, []string{"ScaleRestore kube-system/coredns"}},
		{94 * time.Second, nil}, // bounce recorded on the Deployment: not repeated
		{10 * time.Minute, nil},
	}
	for _, step := range steps {
		w.s.Now = at(step.at)
		p := PlanFor(w.s)
		var keys []string
		for _, a := range p.Actions {
			keys = append(keys, a.Key())
		}
		if !reflect.DeepEqual(keys, step.want) {
			t.Fatalf("at %s: actions %q, want %q", step.at, keys, step.want)
		}
		fakeApply(t, w, p)
	}
	if d := w.s.Deployments[0]; *d.Spec.Replicas != 1 || !reflect.DeepEqual(d.Annotations, map[string]string{ScaleBouncedForAnnotation: "2026-03-01T12:00:00Z"}) {
		t.Errorf("Deployment after the bounce: replicas %d, annotations %v", *d.Spec.Replicas, d.Annotations)
	}
}

// TestPlanForDeterministic: the plan does not depend on the order of the
// snapshot's lists, and PlanFor does not modify the snapshot.
func TestPlanForDeterministic(t *testing.T) {
	build := func() *world {
		w := s1(at(time.Minute))
		w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 3
		w.s.Nodes[2].Spec.Taints = []corev1.Taint{outOfService()}
		w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
		w.pod("etcd-1", "node-4", "StatefulSet", "etcd")
		w.pod("kube-proxy-1", "node-1", "DaemonSet", "kube-proxy")
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			w.deploymentPod(n, "node-"+strconv.Itoa(1+len(n)%4), 1, 0)
		}
		terminating(w.deploymentPod("f", "node-1", 2, 1), at(40*time.Second))
		w.policy("other", func(p *v1alpha1.RecoveryPolicy) {
			p.Spec.Critical = v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}}
			p.Spec.DryRun = true
		})
		return w
	}
	want := PlanFor(build().s)
	if len(want.Actions) != 3 || len(want.Critical) != 10 {
		t.Fatalf("reference plan has %d actions, %d critical pods", len(want.Actions), len(want.Critical))
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		w := build()
		shuffle(rng, w.s.Nodes)
		shuffle(rng, w.s.Pods)
		shuffle(rng, w.s.ReplicaSets)
		shuffle(rng, w.s.Deployments)
		shuffle(rng, w.s.Policies)
		before := build()
		got := PlanFor(w.s)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffle %d: plan differs", i)
		}
		// Same objects, only reordered: sort them back and compare.
		if !sameObjects(w.s.Pods, before.s.Pods) {
			t.Fatalf("shuffle %d: PlanFor modified the pods", i)
		}
	}
}

func shuffle[T any](rng *rand.Rand, s []T) {
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
}

func sameObjects(a, b []*corev1.Pod) bool {
	byName := make(map[string]*corev1.Pod, len(b))
	for _, p := range b {
		byName[p.Name] = p
	}
	for _, p := range a {
		if !reflect.DeepEqual(p, byName[p.Name]) {
			return false
		}
	}
	return len(a) == len(b)
}
