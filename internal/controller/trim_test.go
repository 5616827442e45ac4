package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

// TestTrimPodKeepsWhatThePlannerReads: the controller must decide on the
// trimmed pod as diagnose does on the full one. A generic ephemeral volume
// makes a pod stateful (it was dropped once, and the controller called
// Stateless what diagnose called WaitingForFencing); nodeSelector,
// required affinity and requests decide the target check.
func TestTrimPodKeepsWhatThePlannerReads(t *testing.T) {
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "db-x", UID: "p"},
		Spec: corev1.PodSpec{
			NodeName:     "node-3",
			NodeSelector: map[string]string{"role": "db"},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpExists}}}}}}},
			Containers: []corev1.Container{{Name: "db", Image: "db:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}},
			Volumes: []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
					Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}},
			},
		},
	}
	out, err := trimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].Ephemeral == nil {
		t.Errorf("volumes = %+v, want the ephemeral one only", p.Spec.Volumes)
	}
	if p.Spec.NodeSelector["role"] != "db" || p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("scheduling constraints dropped: %+v", p.Spec)
	}
	if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "2" || p.Spec.Containers[0].Image != "" || p.Spec.Containers[0].Env != nil {
		t.Errorf("containers = %+v, want one with the pod's requests only", p.Spec.Containers)
	}

	// The decision on the trimmed pod equals the one on the full pod.
	decide := func(pod *corev1.Pod) rescue.Decision {
		now := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
		node := func(name string, st corev1.ConditionStatus) *corev1.Node {
			var taints []corev1.Taint
			if st != corev1.ConditionTrue {
				taints = append(taints, rescue.NotReadyTaint(st))
			}
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}
		}
		pod.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "db-1", UID: "rs", Controller: ptr.To(true)}}
		plan := rescue.PlanFor(rescue.Snapshot{
			Now:         now,
			Nodes:       []*corev1.Node{node("node-0", corev1.ConditionTrue), node("node-3", corev1.ConditionUnknown)},
			Pods:        []*corev1.Pod{pod},
			ReplicaSets: []*appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "db-1", UID: "rs"}}},
			Policies:    []*v1alpha1.RecoveryPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.RecoveryPolicySpec{Critical: v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}}}}},
		})
		if len(plan.Critical) != 1 {
			t.Fatalf("critical = %+v", plan.Critical)
		}
		return plan.Critical[0].Decision
	}
	if a, b := decide(full.DeepCopy()), decide(p.DeepCopy()); a != b || a != rescue.DecisionWaitingForFencing {
		t.Errorf("decision on the full pod %s, on the trimmed pod %s; want both WaitingForFencing", a, b)
	}
}

// TestNodePredicateSeesCordon: an uncordon must start a pass at once, so
// that a NoTarget pod is replaced within seconds (S7).
func TestNodePredicateSeesCordon(t *testing.T) {
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	n := old.DeepCopy()
	n.Spec.Unschedulable = false
	if !nodePredicate().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n}) {
		t.Error("uncordon filtered out")
	}
	grown := old.DeepCopy()
	grown.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	if !nodePredicate().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: grown}) {
		t.Error("allocatable change filtered out")
	}
}

// TestTrimPodKeepsRequests: the trimmed pod requests what the scheduler
// counts for the full one (containers, a sidecar and a plain init
// container, overhead), and keeps of its conditions only DisruptionTarget.
func TestTrimPodKeepsRequests(t *testing.T) {
	cpu := func(v string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v), corev1.ResourceMemory: resource.MustParse("64Mi")}}
	}
	full := &corev1.Pod{
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "a", Resources: cpu("500m")}, {Name: "b", Resources: cpu("250m")}},
			InitContainers: []corev1.Container{{Name: "setup", Resources: cpu("2")}, {Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: cpu("100m")}},
			Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
		},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"},
		}},
	}
	want := resourcehelper.PodRequests(full, resourcehelper.PodResourcesOptions{})
	out, err := trimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	got := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	if !equality.Semantic.DeepEqual(got, want) || len(p.Spec.Containers) != 1 || p.Spec.InitContainers != nil {
		t.Errorf("trimmed requests %v in %d containers, want %v in one", got, len(p.Spec.Containers), want)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("conditions = %+v, want DisruptionTarget only", p.Status.Conditions)
	}
	none, _ := trimPod(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause"}}}})
	if c := none.(*corev1.Pod).Spec.Containers; c != nil {
		t.Errorf("a pod that requests nothing keeps containers %+v, want none", c)
	}
}

// TestTrimPodKeepsInlineExclusiveVolumes: an inline disk or LUN makes a
// Deployment pod exclusive (rescue.ExclusiveInlineVolume); the trimmed pod
// keeps it, so that the controller waits for fencing as diagnose does.
// Shared and per-node volumes are still dropped.
func TestTrimPodKeepsInlineExclusiveVolumes(t *testing.T) {
	exclusive := map[string]corev1.VolumeSource{
		"iscsi":                {ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.5:3260", IQN: "iqn.2001-04.com.example:lun1"}},
		"fc":                   {FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr.To(int32(0))}},
		"rbd":                  {RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"10.0.0.6:6789"}, RBDImage: "img"}},
		"gcePersistentDisk":    {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "pd-1"}},
		"awsElasticBlockStore": {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}},
		"cinder":               {Cinder: &corev1.CinderVolumeSource{VolumeID: "c-1"}},
		"azureDisk":            {AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "d-1", DataDiskURI: "https://example/d-1.vhd"}},
		"vsphereVolume":        {VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds] v1.vmdk"}},
		"photonPersistentDisk": {PhotonPersistentDisk: &corev1.PhotonPersistentDiskVolumeSource{PdID: "p-1"}},
		"portworxVolume":       {PortworxVolume: &corev1.PortworxVolumeSource{VolumeID: "px-1"}},
		"scaleIO":              {ScaleIO: &corev1.ScaleIOVolumeSource{VolumeName: "s-1"}},
		"storageos":            {StorageOS: &corev1.StorageOSVolumeSource{VolumeName: "so-1"}},
		"flocker":              {Flocker: &corev1.FlockerVolumeSource{DatasetName: "ds-1"}},
		"flexVolume":           {FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/lvm"}},
	}
	for kind, src := range exclusive {
		t.Run(kind, func(t *testing.T) {
			full := deploymentPodOnDownNode()
			full.Spec.Volumes = []corev1.Volume{
				{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}},
				{Name: "disk", VolumeSource: src},
			}
			trimmed := trimmedCopy(t, full)
			if len(trimmed.Spec.Volumes) != 1 || trimmed.Spec.Volumes[0].Name != "disk" ||
				!equality.Semantic.DeepEqual(trimmed.Spec.Volumes[0].VolumeSource, src) {
				t.Errorf("volumes = %+v, want the %s volume only", trimmed.Spec.Volumes, kind)
			}
			a, b := decideOnDownNode(t, full), decideOnDownNode(t, trimmed)
			if a.Decision != b.Decision || a.Decision != rescue.DecisionWaitingForFencing || a.Reason != b.Reason {
				t.Errorf("full pod %s (%s), trimmed pod %s (%s); want both WaitingForFencing", a.Decision, a.Reason, b.Decision, b.Reason)
			}
		})
	}
	t.Run("read-only iscsi is dropped: it may be shared", func(t *testing.T) {
		full := deploymentPodOnDownNode()
		full.Spec.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{IQN: "iqn.x", ReadOnly: true}}}}
		if v := trimmedCopy(t, full).Spec.Volumes; len(v) != 0 {
			t.Errorf("volumes = %+v, want none", v)
		}
	})
}

// TestTrimPodKeepsTargetChecks: host ports (containers and sidecars),
// required inter-pod affinity and anti-affinity and scheduling gates
// decide where a replacement may run; the trimmed pods decide as the full
// ones do, preferred terms are dropped.
func TestTrimPodKeepsTargetChecks(t *testing.T) {
	web := map[string]string{"app": "web"}
	full := deploymentPodOnDownNode()
	full.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, HostPort: 53, Protocol: corev1.ProtocolUDP}}
	full.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{{ContainerPort: 9443, HostPort: 9443}}}}
	term := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: web}, TopologyKey: "kubernetes.io/hostname"}
	full.Spec.Affinity = &corev1.Affinity{
		PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  []corev1.PodAffinityTerm{term},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term}},
		},
		PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}},
	}
	full.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/gate"}}
	trimmed := trimmedCopy(t, full)
	if got, want := rescue.HostPorts(trimmed), rescue.HostPorts(full); !equality.Semantic.DeepEqual(got, want) || len(want) != 2 {
		t.Errorf("host ports %+v, want %+v", got, want)
	}
	a := trimmed.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution != nil || a.PodAffinity == nil || a.NodeAffinity != nil {
		t.Errorf("affinity = %+v, want the required pod terms only", a)
	}
	if len(trimmed.Spec.SchedulingGates) != 1 {
		t.Errorf("scheduling gates dropped")
	}

	// The same decision on the trimmed pods, for each check: a Ready
	// node's pod holds the host port, or matches the anti-affinity.
	full.Spec.SchedulingGates, full.Spec.Affinity.PodAffinity = nil, nil
	for name, other := range map[string]*corev1.Pod{
		"host port": {ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "dns", UID: "o1"}, Spec: corev1.PodSpec{NodeName: "node-0",
			Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53, Protocol: corev1.ProtocolUDP}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		"anti-affinity": {ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "web", UID: "o2", Labels: web},
			Spec: corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "c"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	} {
		t.Run(name, func(t *testing.T) {
			a := decideOnDownNode(t, full.DeepCopy(), other.DeepCopy())
			b := decideOnDownNode(t, trimmedCopy(t, full), trimmedCopy(t, other))
			if a.Decision != rescue.DecisionNoTarget || b.Decision != a.Decision || a.Reason != b.Reason {
				t.Errorf("full pods %s (%s), trimmed pods %s (%s); want both NoTarget", a.Decision, a.Reason, b.Decision, b.Reason)
			}
		})
	}
}

// TestSharedContainersKeepHostPorts: two pods that request the same but
// take different host ports never share their trimmed container.
func TestSharedContainersKeepHostPorts(t *testing.T) {
	transform := podTransform(newSharedParts())
	pod := func(port int32) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			Ports:     []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}}}}}
	}
	var got []int32
	for _, port := range []int32{80, 443, 80} {
		out, err := transform(pod(port))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rescue.HostPorts(out.(*corev1.Pod))[0].HostPort)
	}
	if got[0] != 80 || got[1] != 443 || got[2] != 80 {
		t.Errorf("host ports after sharing = %v, want [80 443 80]", got)
	}
}

// deploymentPodOnDownNode is a pod of a Deployment's ReplicaSet bound to
// node-3, with one container that requests 100m.
func deploymentPodOnDownNode() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "app-x", UID: "p", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "app-1", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			NodeName:   "node-3",
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// trimmedCopy runs the pod cache's transform (trim and sharing) on a copy.
func trimmedCopy(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := podTransform(newSharedParts())(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

// decideOnDownNode plans for pod, stranded on node-3 (NotReady for an
// hour) with node-0 Ready, and the other pods given, and returns the
// pod's decision.
func decideOnDownNode(t *testing.T, pod *corev1.Pod, others ...*corev1.Pod) rescue.CriticalPod {
	t.Helper()
	now := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	node := func(name string, st corev1.ConditionStatus) *corev1.Node {
		var taints []corev1.Taint
		if st != corev1.ConditionTrue {
			// kube-controller-manager's, at once.
			taints = append(taints, rescue.NotReadyTaint(st))
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "app-1", UID: "rs"}}
	plan := rescue.PlanFor(rescue.Snapshot{
		Now:         now,
		Nodes:       []*corev1.Node{node("node-0", corev1.ConditionTrue), node("node-3", corev1.ConditionUnknown)},
		Pods:        append([]*corev1.Pod{pod}, others...),
		Namespaces:  map[string]map[string]string{"kube-system": {}, "apps": {}},
		ReplicaSets: []*appsv1.ReplicaSet{rs},
		Policies:    []*v1alpha1.RecoveryPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.RecoveryPolicySpec{Critical: v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}}}}},
	})
	for _, c := range plan.Critical {
		if c.Name == pod.Name {
			return c
		}
	}
	t.Fatalf("pod %s not in the plan: %+v", pod.Name, plan.Critical)
	return rescue.CriticalPod{}
}
