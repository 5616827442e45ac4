package rescue

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestInlineExclusiveVolumes: a Deployment pod with an inline volume that
// attaches to one node at a time moves only off a fenced node, like one
// with a ReadWriteOnce PVC; shared and per-node volumes leave it
// Stateless.
func TestInlineExclusiveVolumes(t *testing.T) {
	exclusive := map[string]corev1.VolumeSource{
		"gcePersistentDisk":              {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "pd-1"}},
		"awsElasticBlockStore":           {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}},
		"awsElasticBlockStore read-only": {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1", ReadOnly: true}},
		"iscsi":                          {ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.5:3260", IQN: "iqn.2001-04.com.example:lun1", Lun: 0}},
		"rbd":                            {RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"10.0.0.6:6789"}, RBDPool: "rbd", RBDImage: "img"}},
		"fc":                             {FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr(int32(2))}},
		"flexVolume":                     {FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/lvm"}},
		"cinder":                         {Cinder: &corev1.CinderVolumeSource{VolumeID: "c-1"}},
		"cinder read-only":               {Cinder: &corev1.CinderVolumeSource{VolumeID: "c-1", ReadOnly: true}},
		"azureDisk":                      {AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "d-1", DataDiskURI: "https://example/d-1.vhd"}},
		"vsphereVolume":                  {VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds] vols/v1.vmdk"}},
		"photonPersistentDisk":           {PhotonPersistentDisk: &corev1.PhotonPersistentDiskVolumeSource{PdID: "p-1"}},
		"portworxVolume":                 {PortworxVolume: &corev1.PortworxVolumeSource{VolumeID: "px-1"}},
		"scaleIO":                        {ScaleIO: &corev1.ScaleIOVolumeSource{Gateway: "gw", System: "sys", VolumeName: "s-1"}},
		"storageos":                      {StorageOS: &corev1.StorageOSVolumeSource{VolumeName: "so-1"}},
		"flocker":                        {Flocker: &corev1.FlockerVolumeSource{DatasetName: "ds-1"}},
	}
	shared := map[string]corev1.VolumeSource{
		"gcePersistentDisk read-only": {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "pd-1", ReadOnly: true}},
		"iscsi read-only":             {ISCSI: &corev1.ISCSIVolumeSource{IQN: "iqn.2001-04.com.example:lun1", ReadOnly: true}},
		"rbd read-only":               {RBD: &corev1.RBDVolumeSource{RBDImage: "img", ReadOnly: true}},
		"fc read-only":                {FC: &corev1.FCVolumeSource{ReadOnly: true}},
		"flexVolume read-only":        {FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/lvm", ReadOnly: true}},
		"csi (inline ephemeral)":      {CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}},
		"nfs":                         {NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}},
		"cephfs":                      {CephFS: &corev1.CephFSVolumeSource{Monitors: []string{"m"}}},
		"glusterfs":                   {Glusterfs: &corev1.GlusterfsVolumeSource{EndpointsName: "g", Path: "v"}},
		"azureFile":                   {AzureFile: &corev1.AzureFileVolumeSource{ShareName: "s"}},
		"quobyte":                     {Quobyte: &corev1.QuobyteVolumeSource{Registry: "r", Volume: "v"}},
		"emptyDir":                    {EmptyDir: &corev1.EmptyDirVolumeSource{}},
		"hostPath":                    {HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/x"}},
		"configMap":                   {ConfigMap: &corev1.ConfigMapVolumeSource{}},
		"secret":                      {Secret: &corev1.SecretVolumeSource{SecretName: "s"}},
		"projected":                   {Projected: &corev1.ProjectedVolumeSource{}},
		"downwardAPI":                 {DownwardAPI: &corev1.DownwardAPIVolumeSource{}},
		"image":                       {Image: &corev1.ImageVolumeSource{Reference: "example.com/data:1"}},
	}
	var tests []planCase
	for kind, src := range exclusive {
		tests = append(tests, planCase{
			name: kind + ": WaitingForFencing",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Pods[0].Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: src}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionWaitingForFencing},
			reasons:   map[string]string{coredns: "pod with exclusive storage (inline volume data (" + strings.Fields(kind)[0]},
			check: func(t *testing.T, p Plan) {
				if c := p.Critical[0].Workload.Class; c != ClassStateful {
					t.Errorf("class = %s, want Stateful", c)
				}
			},
		}, planCase{
			name: kind + ", fenced node: ForceDelete",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{outOfService()}
				w.s.Pods[0].Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: src}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ForceDelete kube-system/" + coredns},
		})
	}
	for kind, src := range shared {
		tests = append(tests, planCase{
			name: kind + ": Stateless, deleted",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Pods[0].Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: src}}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		})
	}
	runPlanCases(t, tests)
}

// TestExclusiveInlineVolumeNamesTheVolume: the reason says which volume
// and what it points at, so that an operator knows what to fence.
func TestExclusiveInlineVolumeNamesTheVolume(t *testing.T) {
	v := corev1.Volume{Name: "lun", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{IQN: "iqn.2001-04.com.example:db", Lun: 3}}}
	got := ExclusiveInlineVolume(&v)
	want := "inline volume lun (iscsi iqn.2001-04.com.example:db lun 3) attaches to one node at a time"
	if !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to start with %q", got, want)
	}
	if got := ExclusiveInlineVolume(&corev1.Volume{Name: "c", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}); got != "" {
		t.Errorf("a PVC is decided by its access modes, not here: got %q", got)
	}
}
