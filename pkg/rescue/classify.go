package rescue

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

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
// ReadWriteOnce or ReadWriteOncePod, or an inline volume that attaches to
// one node at a time (ExclusiveInlineVolume). A PVC missing from the
// snapshot counts as exclusive: when unsure, wait for fencing rather than
// risk two writers.
func exclusiveVolume(pod *corev1.Pod, idx *snapshotIndex) string {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if why := ExclusiveInlineVolume(v); why != "" {
			return why
		}
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

// ExclusiveInlineVolume describes an inline volume (not a PVC) that only
// one node may use at a time, or returns "". Such a pod is treated like
// one with a ReadWriteOnce PVC: it moves only off a fenced node. The
// attach/detach controller refuses a second attachment only for a
// ReadWriteOnce persistent volume, never for an inline one, so deleting
// the pod of a node that is merely cut off would let its replacement
// attach the same disk or LUN elsewhere while the old copy still writes.
// The controller's pod cache keeps exactly the volumes this names.
//
// In, by the VolumeSource fields of the core API:
//
//   - gcePersistentDisk, iscsi, rbd, fc: exclusive unless mounted
//     readOnly (the scheduler's VolumeRestrictions lets several pods
//     share a GCE PD, an iSCSI target or an RBD image only when all mount
//     it read-only; an FC LUN is the same kind of shared block device);
//   - awsElasticBlockStore, cinder, azureDisk, vsphereVolume,
//     photonPersistentDisk: a cloud disk attaches to one instance, read
//     only or not (VolumeRestrictions allows no two pods one EBS volume);
//   - portworxVolume, scaleIO, storageos, flocker: block volumes of
//     storage systems whose inline form says nothing of sharing, so
//     exclusive when unsure;
//   - flexVolume: the driver decides, which rebound cannot see; exclusive
//     unless readOnly.
//
// Out: emptyDir, hostPath (each node has its own), secret, configMap,
// downwardAPI, projected, gitRepo (copies of API data), image (read-only
// by definition), nfs, glusterfs, cephfs, quobyte, azureFile (shared file
// systems, many nodes at once by design), csi (an inline ephemeral CSI
// volume is provisioned for one pod on its node and dies with it: the
// replacement gets its own, nothing is shared), and persistentVolumeClaim
// and ephemeral, whose access modes decide (exclusiveVolume).
func ExclusiveInlineVolume(v *corev1.Volume) string {
	kind, readOnlyShares, readOnly := "", false, false
	switch src := &v.VolumeSource; {
	case src.GCEPersistentDisk != nil:
		kind, readOnlyShares, readOnly = "gcePersistentDisk "+src.GCEPersistentDisk.PDName, true, src.GCEPersistentDisk.ReadOnly
	case src.ISCSI != nil:
		kind, readOnlyShares, readOnly = fmt.Sprintf("iscsi %s lun %d", src.ISCSI.IQN, src.ISCSI.Lun), true, src.ISCSI.ReadOnly
	case src.RBD != nil:
		kind, readOnlyShares, readOnly = "rbd "+src.RBD.RBDPool+"/"+src.RBD.RBDImage, true, src.RBD.ReadOnly
	case src.FC != nil:
		kind, readOnlyShares, readOnly = "fc", true, src.FC.ReadOnly
	case src.FlexVolume != nil:
		kind, readOnlyShares, readOnly = "flexVolume "+src.FlexVolume.Driver, true, src.FlexVolume.ReadOnly
	case src.AWSElasticBlockStore != nil:
		kind = "awsElasticBlockStore " + src.AWSElasticBlockStore.VolumeID
	case src.Cinder != nil:
		kind = "cinder " + src.Cinder.VolumeID
	case src.AzureDisk != nil:
		kind = "azureDisk " + src.AzureDisk.DiskName
	case src.VsphereVolume != nil:
		kind = "vsphereVolume " + src.VsphereVolume.VolumePath
	case src.PhotonPersistentDisk != nil:
		kind = "photonPersistentDisk " + src.PhotonPersistentDisk.PdID
	case src.PortworxVolume != nil:
		kind = "portworxVolume " + src.PortworxVolume.VolumeID
	case src.ScaleIO != nil:
		kind = "scaleIO " + src.ScaleIO.VolumeName
	case src.StorageOS != nil:
		kind = "storageos " + src.StorageOS.VolumeName
	case src.Flocker != nil:
		kind = "flocker " + src.Flocker.DatasetName + src.Flocker.DatasetUUID
	default:
		return ""
	}
	if readOnlyShares && readOnly {
		return ""
	}
	return fmt.Sprintf("inline volume %s (%s) attaches to one node at a time, and nothing stops a second node from attaching an inline volume", v.Name, strings.TrimSpace(kind))
}
