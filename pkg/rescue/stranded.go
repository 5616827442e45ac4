package rescue

import (
	"fmt"
	"math"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/pkg/zone"
)

// upstreamEviction is when kube-controller-manager's taint-eviction
// controller will delete a pod from its NotReady node on its own, and how
// the planner knows.
type upstreamEviction struct {
	// at is the eviction time; zero means never.
	at time.Time
	// estimated is true when the node has no eviction taint yet and at
	// comes from the zone's tainting rate. An estimate is counted from now,
	// so it moves with time; a taint's timeAdded does not.
	estimated bool
	reason    string
}

// evictionFor predicts upstream's eviction of a pod bound to a NotReady
// node.
//
// A node already tainted (node.kubernetes.io/unreachable or not-ready,
// NoExecute): the pod goes at the taint's timeAdded plus the pod's
// tolerationSeconds for it, mirroring processPodOnNode and
// getMinTolerationTime in k8s.io/kubernetes
// pkg/controller/tainteviction/taint_eviction.go. No toleration means at
// once; a toleration without seconds means never.
//
// A node not tainted yet: the taint comes at the zone's rate (pkg/zone:
// rate 0, as in a small PartialDisruption zone, means never), at the
// latest bound of zone.EvictionETA for the node's place in the queue, then
// the toleration runs. The latest bound is used because rebound must act
// when upstream will not surely be in time.
//
// Other NoExecute taints (out-of-service included) are ignored: rebound acts
// on fenced nodes itself rather than leave the pod to upstream's pod GC.
func evictionFor(pod *corev1.Pod, node *nodeState, zones *zone.Cluster, now time.Time) upstreamEviction {
	if len(node.evictionTaints) > 0 {
		return evictionByTaints(pod, node.evictionTaints, now)
	}

	key := corev1.TaintNodeUnreachable
	if node.readyStatus == corev1.ConditionFalse {
		key = corev1.TaintNodeNotReady
	}
	z, _ := zones.Zone(node.zone)
	_, latest, ok := zone.EvictionETA(z.Rate, node.ahead)
	if !ok {
		return upstreamEviction{reason: fmt.Sprintf(
			"node not tainted yet and zone %s is %s with NoExecute tainting rate %g/s: upstream never evicts (%s)",
			zone.DisplayZone(node.zone), z.State, z.Rate, z.RateReason)}
	}
	taintAt := now.Add(latest)
	queue := fmt.Sprintf("node not tainted yet; zone %s (%s) taints at %g/s with %d node(s) ahead: %s expected by %s",
		zone.DisplayZone(node.zone), z.State, z.Rate, node.ahead, key, formatTime(taintAt))
	tol, tolerated, forever := tolerationFor(pod, key, "")
	switch {
	case forever:
		return upstreamEviction{estimated: true, reason: queue + ", but the pod tolerates it without tolerationSeconds: upstream never evicts"}
	case !tolerated:
		return upstreamEviction{at: taintAt, estimated: true, reason: queue + ", the pod does not tolerate it: evicted then"}
	default:
		at := taintAt.Add(tol)
		return upstreamEviction{at: at, estimated: true, reason: fmt.Sprintf("%s, + toleration %s: upstream evicts about %s",
			queue, tol, formatTime(at))}
	}
}

// evictionByTaints is the earliest eviction any of the node's eviction
// taints causes.
func evictionByTaints(pod *corev1.Pod, taints []*corev1.Taint, now time.Time) upstreamEviction {
	var best upstreamEviction
	var forever []string
	for _, t := range taints {
		added := now // a taint without timeAdded: the eviction clock starts when upstream sees it, at the latest now
		if t.TimeAdded != nil {
			added = t.TimeAdded.Time
		}
		tol, tolerated, never := tolerationFor(pod, t.Key, t.Value)
		if never {
			forever = append(forever, t.Key)
			continue
		}
		at := added.Add(tol)
		if !best.at.IsZero() && !at.Before(best.at) {
			continue
		}
		best.at = at
		if tolerated {
			best.reason = fmt.Sprintf("node tainted %s:NoExecute at %s, the pod tolerates it for %s: upstream evicts at %s",
				t.Key, formatTime(added), tol, formatTime(at))
		} else {
			best.reason = fmt.Sprintf("node tainted %s:NoExecute at %s and the pod does not tolerate it: upstream evicts at once",
				t.Key, formatTime(added))
		}
	}
	if best.at.IsZero() {
		best.reason = fmt.Sprintf("the pod tolerates %v without tolerationSeconds: upstream never evicts", forever)
	}
	return best
}

// tolerationFor mirrors upstream's choice of tolerations for one NoExecute
// taint (v1.Toleration.ToleratesTaint, without the comparison operators
// these taints never need) and getMinTolerationTime over them: the shortest
// tolerationSeconds (<= 0 meaning 0) of the matching tolerations; forever
// when every match has none; tolerated=false when none matches.
func tolerationFor(pod *corev1.Pod, key, value string) (d time.Duration, tolerated, forever bool) {
	minSeconds := int64(math.MaxInt64)
	for i := range pod.Spec.Tolerations {
		t := &pod.Spec.Tolerations[i]
		if !toleratesNoExecute(t, key, value) {
			continue
		}
		tolerated = true
		if t.TolerationSeconds == nil {
			continue
		}
		if *t.TolerationSeconds <= 0 {
			return 0, true, false
		}
		minSeconds = min(minSeconds, *t.TolerationSeconds)
	}
	switch {
	case !tolerated:
		return 0, false, false
	case minSeconds == math.MaxInt64:
		return 0, true, true
	case minSeconds > int64(math.MaxInt64/time.Second):
		// Beyond time.Duration: as good as forever.
		return 0, true, true
	default:
		return time.Duration(minSeconds) * time.Second, true, false
	}
}

// toleratesNoExecute is v1.Toleration.ToleratesTaint for a NoExecute taint
// of this key and value: an empty effect matches every effect, an empty key
// (with Exists) every key.
func toleratesNoExecute(t *corev1.Toleration, key, value string) bool {
	if t.Effect != "" && t.Effect != corev1.TaintEffectNoExecute {
		return false
	}
	if t.Key != "" && t.Key != key {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return t.Value == value
	default:
		return false
	}
}

// formatTime renders a time for reasons: UTC, to the second, stable.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// WorkloadClass says which safety rule applies to a pod.
type WorkloadClass string

const (
	// ClassStateless: owned by a ReplicaSet (usually of a Deployment), no
	// exclusive volume. Deleting the pod makes the ReplicaSet replace it.
	ClassStateless WorkloadClass = "Stateless"
	// ClassStateful: owned by a StatefulSet, or owned by a ReplicaSet but
	// mounting a ReadWriteOnce/ReadWriteOncePod volume. Two copies must never
	// run at once, so it moves only off a fenced node.
	ClassStateful WorkloadClass = "Stateful"
	// ClassDaemonSet: one pod per node by design; never touched.
	ClassDaemonSet WorkloadClass = "DaemonSet"
	// ClassMirror: a static pod's mirror, owned by the kubelet; never touched.
	ClassMirror WorkloadClass = "Mirror"
	// ClassJob: owned by a Job, which replaces lost pods itself.
	ClassJob WorkloadClass = "Job"
	// ClassNoController: no controller owner; a deleted pod would be lost.
	ClassNoController WorkloadClass = "NoController"
	// ClassUnsupported: owned by a controller rebound does not know
	// (ReplicationController, operators' custom resources).
	ClassUnsupported WorkloadClass = "Unsupported"
	// ClassOwnerNotFound: the owning ReplicaSet or Deployment is not in the
	// snapshot (being deleted, or the cache lags); rebound cannot check the
	// rescue, so it does not start one.
	ClassOwnerNotFound WorkloadClass = "OwnerNotFound"
)

// Workload is a pod's owner as rebound sees it.
type Workload struct {
	Class WorkloadClass
	// Kind and Name are the object that owns the pod's fate: the
	// Deployment of a ReplicaSet when there is one, else the direct
	// controller owner. Both are empty for a pod without one. UID is that
	// object's UID when known (Events refer to it).
	Kind, Name string
	UID        types.UID
	// Why says what decided the class, e.g. "PVC data-web-0 is
	// ReadWriteOnce".
	Why string
}

// String renders "Kind/name" or "(no controller)".
func (w Workload) String() string {
	if w.Kind == "" {
		return "(no controller)"
	}
	return w.Kind + "/" + w.Name
}

// owners are the objects behind a stateless or stateful pod that the
// planner reads for availability and scale bounce; nil when absent.
type owners struct {
	replicaSet *appsv1.ReplicaSet
	deployment *appsv1.Deployment
}

// classify finds a pod's workload. The order matters: the never-touched
// kinds first, then pods nothing would recreate (even with an exclusive
// volume, force-deleting those would lose them), then identity and storage.
func classify(pod *corev1.Pod, idx *snapshotIndex) (Workload, owners) {
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return Workload{Class: ClassMirror, Kind: "Node", Name: pod.Spec.NodeName,
			Why: "mirror of a static pod (annotation " + corev1.MirrorPodAnnotationKey + ")"}, owners{}
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return Workload{Class: ClassNoController, Why: "no controller owner reference"}, owners{}
	}
	switch ref.Kind {
	case "DaemonSet":
		return Workload{Class: ClassDaemonSet, Kind: ref.Kind, Name: ref.Name, Why: "owned by a DaemonSet"}, owners{}
	case "Job":
		return Workload{Class: ClassJob, Kind: ref.Kind, Name: ref.Name, Why: "owned by a Job"}, owners{}
	case "StatefulSet":
		return Workload{Class: ClassStateful, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Why: "owned by a StatefulSet"}, owners{}
	case "ReplicaSet":
		return classifyReplicaSetPod(pod, ref, idx)
	default:
		return Workload{Class: ClassUnsupported, Kind: ref.Kind, Name: ref.Name,
			Why: fmt.Sprintf("owned by a %s, which rebound does not manage", ref.Kind)}, owners{}
	}
}

// classifyReplicaSetPod resolves Pod -> ReplicaSet -> Deployment and checks
// the pod's volumes.
func classifyReplicaSetPod(pod *corev1.Pod, ref *metav1.OwnerReference, idx *snapshotIndex) (Workload, owners) {
	rs := idx.replicaSetFor(pod.Namespace, ref)
	if rs == nil {
		return Workload{Class: ClassOwnerNotFound, Kind: ref.Kind, Name: ref.Name,
			Why: fmt.Sprintf("ReplicaSet %s (uid %s) is not in the snapshot", ref.Name, ref.UID)}, owners{}
	}
	o := owners{replicaSet: rs}
	w := Workload{Class: ClassStateless, Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Why: "owned by ReplicaSet " + rs.Name}
	if dref := metav1.GetControllerOfNoCopy(rs); dref != nil && dref.Kind == "Deployment" {
		o.deployment = idx.deploymentFor(rs.Namespace, dref)
		if o.deployment == nil {
			return Workload{Class: ClassOwnerNotFound, Kind: dref.Kind, Name: dref.Name,
				Why: fmt.Sprintf("Deployment %s (uid %s) of ReplicaSet %s is not in the snapshot", dref.Name, dref.UID, rs.Name)}, owners{}
		}
		w = Workload{Class: ClassStateless, Kind: "Deployment", Name: o.deployment.Name, UID: o.deployment.UID,
			Why: fmt.Sprintf("owned by ReplicaSet %s of Deployment %s", rs.Name, o.deployment.Name)}
	}
	if vol := exclusiveVolume(pod, idx); vol != "" {
		w.Class, w.Why = ClassStateful, vol
	}
	return w, o
}

// exclusiveVolume describes the first volume that only one node may use at
// a time: a PVC (or generic ephemeral volume) whose access modes include
// ReadWriteOnce or ReadWriteOncePod. A PVC missing from the snapshot counts
// as exclusive: when unsure, wait for fencing rather than risk two writers.
func exclusiveVolume(pod *corev1.Pod, idx *snapshotIndex) string {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		claim := claimName(pod, v)
		if claim == "" {
			continue
		}
		var modes []corev1.PersistentVolumeAccessMode
		if v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil {
			// The claim may not exist yet; its template says what it will be.
			modes = v.Ephemeral.VolumeClaimTemplate.Spec.AccessModes
		}
		if pvc := idx.pvcs[objKey{pod.Namespace, claim}]; pvc != nil {
			modes = pvc.Spec.AccessModes
		} else if modes == nil {
			return fmt.Sprintf("PVC %s is not in the snapshot (access modes unknown, treated as ReadWriteOnce)", claim)
		}
		for _, m := range modes {
			if m == corev1.ReadWriteOnce || m == corev1.ReadWriteOncePod {
				return fmt.Sprintf("PVC %s is %s", claim, m)
			}
		}
	}
	return ""
}

// available reports whether the pod's owner has all its desired
// replicas available, and says so in words. A StatefulSet is not in the
// snapshot, so its availability is unknown (false).
func (o owners) available() (bool, string) {
	switch {
	case o.deployment != nil:
		d := o.deployment
		want := desiredReplicas(d.Spec.Replicas)
		return d.Status.AvailableReplicas >= want,
			fmt.Sprintf("Deployment %s has %d/%d replicas available", d.Name, d.Status.AvailableReplicas, want)
	case o.replicaSet != nil:
		rs := o.replicaSet
		want := desiredReplicas(rs.Spec.Replicas)
		return rs.Status.AvailableReplicas >= want,
			fmt.Sprintf("ReplicaSet %s has %d/%d replicas available", rs.Name, rs.Status.AvailableReplicas, want)
	default:
		return false, "owner availability unknown"
	}
}
