package rescue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
)

// Targets that add up: the replacements one pass plans, and those earlier
// passes set in motion, take room on their target node; host ports and
// required inter-pod (anti-)affinity are checked as the scheduler checks
// them.

const hostname = "kubernetes.io/hostname"

// fourStranded is S1 with four critical Deployments of one replica, their
// pods dns-a..dns-d on node-1..node-4 (NotReady since t0), each requesting
// 600m, and node-0 alone Ready with 1 CPU: room for exactly one.
func fourStranded(now time.Time) *world {
	w := newWorld(now)
	n0 := w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
	allocatable(n0, "1", "110")
	for i := 1; i <= 4; i++ {
		w.node(fmt.Sprintf("node-%d", i), "z1", corev1.ConditionUnknown, t0)
	}
	for _, n := range w.s.Nodes {
		n.Labels[hostname] = n.Name
	}
	for i, x := range []string{"a", "b", "c", "d"} {
		withRequests(w.deploymentPod("dns-"+x, fmt.Sprintf("node-%d", i+1), 1, 0), "600m")
	}
	w.policy("default")
	return w
}

func dns(x string) string { return "dns-" + x + "-5d4f-x1" }

// podNamed finds a pod of the world by name.
func (w *world) podNamed(name string) *corev1.Pod {
	for _, p := range w.s.Pods {
		if p.Name == name {
			return p
		}
	}
	panic("no pod " + name)
}

// pendingLike adds an unbound copy of p, as its ReplicaSet creates it.
func (w *world) pendingLike(p *corev1.Pod, name string) *corev1.Pod {
	q := p.DeepCopy()
	q.Name, q.UID, q.ResourceVersion = name, types.UID("uid-pod-"+name), "9"
	q.Spec.NodeName = ""
	q.DeletionTimestamp, q.DeletionGracePeriodSeconds = nil, nil
	q.Status = corev1.PodStatus{Phase: corev1.PodPending}
	w.s.Pods = append(w.s.Pods, q)
	return q
}

func noTargetBut(d Decision, act ...string) map[string]Decision {
	m := map[string]Decision{}
	for _, x := range []string{"a", "b", "c", "d"} {
		m[dns(x)] = DecisionNoTarget
	}
	for _, x := range act {
		m[dns(x)] = d
	}
	return m
}

func reasonsFor(want string, pods ...string) map[string]string {
	m := map[string]string{}
	for _, x := range pods {
		m[dns(x)] = want
	}
	return m
}

func TestTargetsAddUp(t *testing.T) {
	reservedA := "reserved for the replacement of kube-system/" + dns("a") + " planned in this pass"
	tests := []planCase{
		{
			name:      "1 Ready node of 5, room for one of 4 stranded pods: one delete, 3 NoTarget naming the reservation",
			world:     func() *world { return fourStranded(at(time.Minute)) },
			decisions: noTargetBut(DecisionAct, "a"),
			actions:   []string{"Delete kube-system/" + dns("a")},
			reasons: reasonsFor("no Ready node can run the replacement (insufficient cpu (requests 600m, free 1, of which 600m "+
				reservedA+"): node-0; NotReady: 4 node(s))", "b", "c", "d"),
			nextCheck: at(time.Minute + noTargetRecheck),
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Actions != 1 || r.NoTarget != 3 {
					t.Errorf("report = %+v, want 1 action and 3 NoTarget", r)
				}
			},
		},
		{
			name: "the last pod slot: one delete, the others NoTarget naming the reservation",
			world: func() *world {
				w := fourStranded(at(time.Minute))
				allocatable(node0(w), "8", "2")
				w.runningOn("other", "node-0", "100m", corev1.PodRunning)
				return w
			},
			decisions: noTargetBut(DecisionAct, "a"),
			actions:   []string{"Delete kube-system/" + dns("a")},
			reasons:   reasonsFor("too many pods (1 of 2, and 1 "+reservedA+")", "b", "c", "d"),
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "room for two: two deletes, in deadline order",
			world: func() *world {
				w := fourStranded(at(time.Minute))
				allocatable(node0(w), "1500m", "110")
				// dns-d's node went NotReady first: it is served first.
				w.s.Nodes[4].Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-10 * time.Second))
				return w
			},
			decisions: noTargetBut(DecisionAct, "a", "d"),
			actions:   []string{"Delete kube-system/" + dns("a"), "Delete kube-system/" + dns("d")},
			reasons:   reasonsFor("reserved for the replacement of kube-system/"+dns("d")+" planned in this pass (+1 more)", "b", "c"),
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "second pass, the first replacement Pending: no further delete",
			world: func() *world {
				w := fourStranded(at(90 * time.Second))
				terminating(w.podNamed(dns("a")), at(time.Minute))
				w.pendingLike(w.podNamed(dns("a")), "dns-a-5d4f-y2")
				return w
			},
			decisions: noTargetBut(DecisionInFlight, "a"),
			reasons:   reasonsFor("of which 600m reserved for Pending pod kube-system/dns-a-5d4f-y2", "b", "c", "d"),
			nextCheck: at(90*time.Second + noTargetRecheck),
			check: func(t *testing.T, p Plan) {
				if len(p.Actions) != 0 {
					t.Errorf("actions = %v, want none", p.Actions)
				}
			},
		},
		{
			// The pass after a delete may run before the cache shows the
			// ReplicaSet's new pod: the deleted pod stands for it.
			name: "second pass, the replacement not in the snapshot yet: no further delete",
			world: func() *world {
				w := fourStranded(at(90 * time.Second))
				terminating(w.podNamed(dns("a")), at(time.Minute))
				return w
			},
			decisions: noTargetBut(DecisionInFlight, "a"),
			reasons: reasonsFor("of which 600m reserved for the replacement of kube-system/"+dns("a")+" (deleted, not yet available)",
				"b", "c", "d"),
			nextCheck: at(90*time.Second + noTargetRecheck),
		},
		{
			name: "second pass, the replacement bound but not available yet: no further delete",
			world: func() *world {
				w := fourStranded(at(90 * time.Second))
				terminating(w.podNamed(dns("a")), at(time.Minute))
				q := w.pendingLike(w.podNamed(dns("a")), "dns-a-5d4f-y2")
				q.Spec.NodeName, q.Status.Phase = "node-0", corev1.PodRunning
				return w
			},
			decisions: noTargetBut(DecisionInFlight, "a"),
			reasons:   reasonsFor("insufficient cpu (requests 600m, free 400m)", "b", "c", "d"),
			nextCheck: at(90*time.Second + noTargetRecheck),
		},
		{
			name: "second pass, the replacement available: the others still have no room",
			world: func() *world {
				w := fourStranded(at(90 * time.Second))
				terminating(w.podNamed(dns("a")), at(time.Minute))
				q := w.pendingLike(w.podNamed(dns("a")), "dns-a-5d4f-y2")
				q.Spec.NodeName, q.Status.Phase = "node-0", corev1.PodRunning
				w.s.Deployments[0].Status.AvailableReplicas = 1
				w.s.ReplicaSets[0].Status.AvailableReplicas = 1
				return w
			},
			decisions: noTargetBut(DecisionReplaced, "a"),
			reasons:   reasonsFor("insufficient cpu (requests 600m, free 400m): node-0;", "b", "c", "d"),
			nextCheck: at(90*time.Second + noTargetRecheck),
		},
		{
			name: "a Pending pod of another workload takes the room first",
			world: func() *world {
				w := fourStranded(at(time.Minute))
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "batch-x", UID: "uid-batch-x"},
					Status: corev1.PodStatus{Phase: corev1.PodPending}}
				withRequests(p, "500m")
				w.s.Pods = append(w.s.Pods, p)
				return w
			},
			decisions: noTargetBut(DecisionAct),
			reasons:   reasonsFor("of which 500m reserved for Pending pod apps/batch-x", "a", "b", "c", "d"),
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "Pending pods held by scheduling gates, finished or fitting nowhere take no room",
			world: func() *world {
				w := fourStranded(at(time.Minute))
				for i, mutate := range []func(*corev1.Pod){
					func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/queue"}} },
					func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
					func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"gpu": "yes"} },
				} {
					p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: fmt.Sprintf("batch-%d", i), UID: types.UID(fmt.Sprintf("uid-batch-%d", i))},
						Status: corev1.PodStatus{Phase: corev1.PodPending}}
					withRequests(p, "500m")
					mutate(p)
					w.s.Pods = append(w.s.Pods, p)
				}
				return w
			},
			decisions: noTargetBut(DecisionAct, "a"),
			actions:   []string{"Delete kube-system/" + dns("a")},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			// A scale bounce deletes the Pending replacement too, so
			// what its own ReplicaSet reserved does not stop it.
			name: "a scale bounce is not blocked by its own Pending replacement",
			world: func() *world {
				w := fourStranded(at(3 * time.Minute))
				w.s.Pods = w.s.Pods[:1]
				terminating(w.podNamed(dns("a")), at(time.Minute))
				w.pendingLike(w.podNamed(dns("a")), "dns-a-5d4f-y2")
				w.s.Policies[0].Spec.Actions = []v1alpha1.RescueAction{v1alpha1.DeleteAndReplace, v1alpha1.ScaleBounce}
				return w
			},
			decisions: map[string]Decision{dns("a"): DecisionAct},
			actions:   []string{"ScaleDown kube-system/dns-a"},
		},
		{
			// A pod without an action gives its room back: a suspended
			// policy's pod (served first, its policy's name sorts first)
			// does not keep the only slot from the next pod.
			name: "a suspended policy's pod reserves nothing",
			world: func() *world {
				w := fourStranded(at(time.Minute))
				w.s.Pods = w.s.Pods[:2]
				sel := func(app string) *metav1.LabelSelector {
					return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
				}
				w.s.Policies[0].Spec.Critical.PodSelector = sel("dns-b")
				w.policy("aa-suspended", func(p *v1alpha1.RecoveryPolicy) {
					p.Spec.Suspend = true
					p.Spec.Critical.PodSelector = sel("dns-a")
				})
				return w
			},
			decisions: map[string]Decision{dns("a"): DecisionSuspended, dns("b"): DecisionAct},
			reasons:   map[string]string{dns("a"): "policy aa-suspended is suspended, so no action; it would: stranded"},
			actions:   []string{"Delete kube-system/" + dns("b")},
		},
	}
	runPlanCases(t, tests)
}

// oneStranded is S1 with one stranded critical pod, dns-a on node-3, and
// node-0 the only Ready node (unlimited room).
func oneStranded(now time.Time) *world {
	w := newWorld(now)
	w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
	for i := 1; i <= 4; i++ {
		w.node(fmt.Sprintf("node-%d", i), "z1", corev1.ConditionUnknown, t0)
	}
	for _, n := range w.s.Nodes {
		n.Labels[hostname] = n.Name
	}
	w.deploymentPod("dns-a", "node-3", 1, 0)
	w.policy("default")
	return w
}

func withPorts(p *corev1.Pod, ports ...corev1.ContainerPort) {
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "main"}}
	}
	p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, ports...)
}

func hostPort(proto corev1.Protocol, ip string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{ContainerPort: port, HostPort: port, HostIP: ip, Protocol: proto}
}

// runningPod adds a running pod bound to node.
func (w *world) runningPod(ns, name, node string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-pod-" + name), Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	w.s.Pods = append(w.s.Pods, p)
	return p
}

func TestTargetHostPorts(t *testing.T) {
	a := dns("a")
	deleteA := []string{"Delete kube-system/" + a}
	tests := []planCase{
		{
			name: "host port in use on the only Ready node: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				withPorts(w.runningPod("apps", "dns-other", "node-0", nil), hostPort(corev1.ProtocolUDP, "", 53))
				withPorts(w.podNamed(a), hostPort(corev1.ProtocolUDP, "", 53))
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "no Ready node can run the replacement (host port UDP/53 in use: node-0"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "same port, other protocol: Act",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				withPorts(w.runningPod("apps", "dns-other", "node-0", nil), hostPort(corev1.ProtocolUDP, "", 53))
				withPorts(w.podNamed(a), hostPort(corev1.ProtocolTCP, "", 53))
				return w
			},
			decisions: map[string]Decision{a: DecisionAct},
			actions:   deleteA,
		},
		{
			name: "a port bound to one address conflicts with the same port on every address: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				withPorts(w.runningPod("apps", "exporter", "node-0", nil), hostPort(corev1.ProtocolTCP, "10.0.0.1", 9100))
				withPorts(w.podNamed(a), hostPort("", "", 9100))
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "host port TCP/9100 in use"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "a sidecar's host port counts, a plain init container's does not",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				other := w.runningPod("apps", "proxy", "node-0", nil)
				other.Spec.InitContainers = []corev1.Container{
					{Name: "setup", Ports: []corev1.ContainerPort{hostPort(corev1.ProtocolTCP, "", 8080)}},
					{Name: "proxy", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways), Ports: []corev1.ContainerPort{hostPort(corev1.ProtocolTCP, "", 8443)}},
				}
				withPorts(w.podNamed(a), hostPort(corev1.ProtocolTCP, "", 8443))
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "host port TCP/8443 in use"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "two stranded pods want one host port: one delete, the other NoTarget naming the reservation",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				withPorts(w.podNamed(a), hostPort(corev1.ProtocolTCP, "", 8443))
				withPorts(w.deploymentPod("dns-b", "node-4", 1, 0), hostPort(corev1.ProtocolTCP, "", 8443))
				return w
			},
			decisions: map[string]Decision{a: DecisionAct, dns("b"): DecisionNoTarget},
			reasons:   map[string]string{dns("b"): "host port TCP/8443 reserved for the replacement of kube-system/" + a + " planned in this pass"},
			actions:   deleteA,
			nextCheck: at(time.Minute + noTargetRecheck),
		},
	}
	runPlanCases(t, tests)
}

func antiAffinity(p *corev1.Pod, key string, namespaceSelector *metav1.LabelSelector, labels map[string]string) {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: key, NamespaceSelector: namespaceSelector}}}
}

func podAffinity(p *corev1.Pod, key string, labels map[string]string) {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: key}}}
}

func TestTargetInterPodAffinity(t *testing.T) {
	a, b := dns("a"), dns("b")
	deleteA := []string{"Delete kube-system/" + a}
	web := map[string]string{"app": "web"}
	tests := []planCase{
		{
			name: "required anti-affinity: a matching pod on the only Ready node: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.runningPod("kube-system", "web-1", "node-0", web)
				antiAffinity(w.podNamed(a), hostname, nil, web)
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "no Ready node can run the replacement (required pod anti-affinity not satisfied: 1 pod(s) in kubernetes.io/hostname=node-0: node-0"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "required anti-affinity: the matching pod is in another namespace: Act",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.runningPod("apps", "web-1", "node-0", web)
				antiAffinity(w.podNamed(a), hostname, nil, web)
				return w
			},
			decisions: map[string]Decision{a: DecisionAct},
			actions:   deleteA,
		},
		{
			name: "required anti-affinity with a namespaceSelector that selects the other namespace: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.runningPod("apps", "web-1", "node-0", web)
				antiAffinity(w.podNamed(a), hostname, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}, web)
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "required pod anti-affinity not satisfied"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "an existing pod's required anti-affinity against the pod: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				antiAffinity(w.runningPod("kube-system", "loner", "node-0", nil), hostname, nil, map[string]string{"app": "dns-a"})
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "would break the required pod anti-affinity of 1 pod(s) in kubernetes.io/hostname=node-0"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "two replicas, one per node, one Ready node: one delete, the other NoTarget naming the reservation",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				p := w.podNamed(a)
				antiAffinity(p, hostname, nil, map[string]string{"app": "dns-a"})
				w.s.Deployments[0].Spec.Replicas = ptr(int32(2))
				q := p.DeepCopy()
				q.Name, q.UID, q.Spec.NodeName = "dns-a-5d4f-x2", "uid-pod-dns-a-x2", "node-4"
				w.s.Pods = append(w.s.Pods, q)
				return w
			},
			decisions: map[string]Decision{a: DecisionAct, "dns-a-5d4f-x2": DecisionNoTarget},
			reasons: map[string]string{"dns-a-5d4f-x2": "would break the required pod anti-affinity of 1 pod(s) in kubernetes.io/hostname=node-0, among them the replacement of kube-system/" +
				a + " planned in this pass"},
			actions:   deleteA,
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "two replicas, one per node, two Ready nodes: both deleted",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.node("node-5", "z1", corev1.ConditionTrue, t0.Add(-time.Hour)).Labels[hostname] = "node-5"
				p := w.podNamed(a)
				antiAffinity(p, hostname, nil, map[string]string{"app": "dns-a"})
				q := p.DeepCopy()
				q.Name, q.UID, q.Spec.NodeName = "dns-a-5d4f-x2", "uid-pod-dns-a-x2", "node-4"
				w.s.Pods = append(w.s.Pods, q)
				return w
			},
			decisions: map[string]Decision{a: DecisionAct, "dns-a-5d4f-x2": DecisionAct},
			reasons:   map[string]string{"dns-a-5d4f-x2": "Ready node node-5 admits the replacement"},
			actions:   []string{"Delete kube-system/" + a, "Delete kube-system/dns-a-5d4f-x2"},
		},
		{
			// The scheduler counts a Terminating pod: the original, deleted
			// gracefully on its NotReady node, stays in the zone.
			name: "one replica per zone, the original in the only zone: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				antiAffinity(w.podNamed(a), "topology.kubernetes.io/zone", nil, map[string]string{"app": "dns-a"})
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "would break the required pod anti-affinity of 1 pod(s) in topology.kubernetes.io/zone=z1"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			// A force delete removes the original at once.
			name: "one replica per zone, fenced StatefulSet pod: ForceDelete",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.s.Pods = nil
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{outOfService()}
				antiAffinity(w.pod("etcd-0", "node-3", "StatefulSet", "etcd"), "topology.kubernetes.io/zone", nil, map[string]string{"app": "etcd"})
				return w
			},
			decisions: map[string]Decision{"etcd-0": DecisionAct},
			actions:   []string{"ForceDelete kube-system/etcd-0"},
		},
		{
			name: "required affinity: no matching pod on the Ready node: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.runningPod("kube-system", "cache-1", "node-2", map[string]string{"app": "cache"}) // on a NotReady node
				podAffinity(w.podNamed(a), hostname, map[string]string{"app": "cache"})
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "required pod affinity not satisfied: no matching pod in the node's topology domain"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "required affinity: a matching pod on the Ready node: Act",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.runningPod("kube-system", "cache-1", "node-0", map[string]string{"app": "cache"})
				podAffinity(w.podNamed(a), hostname, map[string]string{"app": "cache"})
				return w
			},
			decisions: map[string]Decision{a: DecisionAct},
			actions:   deleteA,
		},
		{
			// The plugin's exception: the first pod of a group with
			// affinity to itself goes anywhere when none matches yet. The
			// original on its NotReady node matches, so it is not the first.
			name: "required affinity to its own group, the original on a NotReady node: NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				podAffinity(w.podNamed(a), hostname, map[string]string{"app": "dns-a"})
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "required pod affinity not satisfied"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "required affinity to its own group, force-deleted original: the first of its group goes anywhere",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.s.Pods = nil
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{outOfService()}
				podAffinity(w.pod("etcd-0", "node-3", "StatefulSet", "etcd"), hostname, map[string]string{"app": "etcd"})
				return w
			},
			decisions: map[string]Decision{"etcd-0": DecisionAct},
			actions:   []string{"ForceDelete kube-system/etcd-0"},
		},
		{
			// The controller's snapshot with running sums but without the
			// Ready node's pods: inter-pod terms cannot be decided there.
			name: "Snapshot.Usage without the Ready node's pods: anti-affinity unknown, NoTarget",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				antiAffinity(w.podNamed(a), hostname, nil, web)
				w.s.Usage = map[string]NodeUsage{"node-0": {Pods: 1}}
				return w
			},
			decisions: map[string]Decision{a: DecisionNoTarget},
			reasons:   map[string]string{a: "required pod anti-affinity unknown: the snapshot lacks the pods of some node in kubernetes.io/hostname=node-0"},
			nextCheck: at(time.Minute + noTargetRecheck),
		},
		{
			name: "Snapshot.Usage with the Ready node's pods: checked",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				antiAffinity(w.podNamed(a), hostname, nil, web)
				w.runningPod("kube-system", "other-1", "node-0", map[string]string{"app": "other"})
				w.s.Usage = map[string]NodeUsage{"node-0": {Pods: 1}}
				return w
			},
			decisions: map[string]Decision{a: DecisionAct},
			actions:   deleteA,
		},
		{
			name: "a pod without inter-pod terms ignores other pods' labels",
			world: func() *world {
				w := oneStranded(at(time.Minute))
				w.runningPod("kube-system", "web-1", "node-0", web)
				antiAffinity(w.deploymentPod("dns-b", "node-4", 1, 0), hostname, nil, web)
				return w
			},
			decisions: map[string]Decision{a: DecisionAct, b: DecisionNoTarget},
			actions:   deleteA,
			nextCheck: at(time.Minute + noTargetRecheck),
		},
	}
	runPlanCases(t, tests)
}

// TestSummarizeRejectionsBounded: reasons that name reservations differ
// per node; the summary lists a bounded number of them.
func TestSummarizeRejectionsBounded(t *testing.T) {
	var rejected []rejection
	for i := range 20 {
		rejected = append(rejected, rejection{node: fmt.Sprintf("node-%02d", i), why: fmt.Sprintf("reason %02d", i)})
	}
	got := summarizeRejections(rejected, downCount{notReady: 3})
	if n := strings.Count(got, "reason "); n != maxReasonGroups {
		t.Errorf("%d reasons listed, want %d: %s", n, maxReasonGroups, got)
	}
	if !strings.Contains(got, "12 more reason(s) for 12 node(s); NotReady: 3 node(s)") {
		t.Errorf("summary = %s", got)
	}
}

// BenchmarkPlanAntiAffinity is BenchmarkPlan with required anti-affinity
// (one replica per node) on every pod of the critical Deployments and
// StatefulSets: each stranded pod's check counts the namespace's pods,
// and the existing pods' terms against it.
func BenchmarkPlanAntiAffinity(b *testing.B) {
	s := buildBenchSnapshot(fullShape)
	for _, p := range s.Pods {
		if p.Namespace == "kube-system" && p.OwnerReferences[0].Kind != "DaemonSet" {
			antiAffinity(p, hostname, nil, map[string]string{"app": p.Labels["app"]})
		}
	}
	b.ReportAllocs()
	var p Plan
	for b.Loop() {
		p = PlanFor(s)
	}
	b.ReportMetric(float64(len(p.Critical)), "critical/op")
	b.ReportMetric(float64(len(p.Actions)), "actions/op")
}
