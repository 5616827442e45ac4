package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"rebound/pkg/etcdsnapshot"
	"rebound/pkg/kubestatus"
	"rebound/pkg/policyfile"
)

// BackupOptions describe one backup.
type BackupOptions struct {
	// Etcd is the member to snapshot.
	Etcd etcdsnapshot.ClientOptions
	// Out is the snapshot file; the metadata goes to Out + ".meta.json".
	// Neither may exist.
	Out string
	// EtcdPrefix is kube-apiserver's --etcd-prefix; "" means /registry.
	EtcdPrefix string
	// Client, when set, is used to record the essential workloads found
	// (Selection; policyfile.Default when empty) and where their pods run.
	Client    kubernetes.Interface
	Selection Selection
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// MetadataSuffix is appended to the snapshot's name for its metadata file.
const MetadataSuffix = ".meta.json"

// Metadata is the small file written next to a snapshot: what a person
// restoring it needs to know before starting.
type Metadata struct {
	Kind    string    `json:"kind"`
	Version int       `json:"version"`
	TakenAt time.Time `json:"takenAt"`
	// Snapshot is the snapshot file's base name.
	Snapshot    string `json:"snapshot"`
	SizeBytes   int64  `json:"sizeBytes"`
	SHA256      string `json:"sha256"`
	Revision    int64  `json:"etcdRevision"`
	TotalKeys   int    `json:"etcdKeys"`
	EtcdVersion string `json:"etcdVersion,omitempty"`
	Endpoint    string `json:"etcdEndpoint"`
	// Nodes are the Node objects in etcd when the backup was taken.
	Nodes []string `json:"nodes"`
	// EssentialWorkloads were found with the kubeconfig; absent without
	// one (EssentialWorkloadsNote says why).
	EssentialWorkloads     []BackupWorkload `json:"essentialWorkloads,omitempty"`
	EssentialWorkloadsNote string           `json:"essentialWorkloadsNote,omitempty"`
}

// BackupWorkload is one essential workload at backup time.
type BackupWorkload struct {
	Workload WorkloadRef `json:"workload"`
	State    State       `json:"state"`
	Message  string      `json:"message"`
	// Nodes are where its pods ran: after a restore on fewer nodes, those
	// on nodes still down are the ones `restore bringup` has to move.
	Nodes []string `json:"nodes"`
}

// MetadataKind is Metadata.Kind.
const MetadataKind = "ReboundBackup"

// Backup takes the etcd snapshot (verified before it is kept) and writes
// its metadata.
func Backup(ctx context.Context, opts BackupOptions) (*Metadata, error) {
	if opts.Out == "" {
		return nil, BadInputf("--out is required: the snapshot file to write")
	}
	metaPath := opts.Out + MetadataSuffix
	for _, p := range []string{opts.Out, metaPath} {
		if _, err := os.Lstat(p); err == nil {
			return nil, BadInputf("%s already exists: choose a new file name (a backup is never overwritten)", p)
		}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.EtcdPrefix == "" {
		opts.EtcdPrefix = "/registry"
	}
	m := &Metadata{Kind: MetadataKind, Version: 1, TakenAt: opts.Now().UTC(), Snapshot: filepath.Base(opts.Out), Endpoint: opts.Etcd.Endpoint}

	// The essential workloads first: an unknown name is bad input, and
	// nothing has been written yet.
	if opts.Client != nil {
		sel := opts.Selection
		explicit := sel.Policy != nil || len(sel.Workloads) > 0
		if !explicit {
			sel.Policy = policyfile.Default()
		}
		refs, err := Resolve(ctx, opts.Client, sel)
		switch {
		case err == nil:
			if err := m.recordWorkloads(ctx, opts.Client, refs); err != nil {
				return nil, err
			}
		case !explicit && ExitCodeOf(err) == ExitBadInput:
			m.EssentialWorkloadsNote = "default policy (kube-system, system-cluster-critical or system-node-critical): " + err.Error()
		default:
			return nil, err
		}
	} else {
		m.EssentialWorkloadsNote = "no kubeconfig given: essential workloads not recorded"
	}

	prefix := strings.TrimSuffix(opts.EtcdPrefix, "/") + "/minions/"
	keys, err := etcdsnapshot.ListKeys(ctx, opts.Etcd, prefix)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		m.Nodes = append(m.Nodes, strings.TrimPrefix(k, prefix))
	}

	res, err := etcdsnapshot.Save(ctx, opts.Etcd, opts.Out)
	if err != nil {
		return nil, err
	}
	m.SizeBytes, m.SHA256, m.Revision, m.TotalKeys, m.EtcdVersion = res.Size, res.SHA256, res.Revision, res.TotalKeys, res.EtcdVersion
	if err := writeJSONNew(metaPath, m); err != nil {
		return nil, fmt.Errorf("snapshot %s saved, but its metadata was not: %w", opts.Out, err)
	}
	return m, nil
}

func (m *Metadata) recordWorkloads(ctx context.Context, client kubernetes.Interface, refs []WorkloadRef) error {
	s, err := gather(ctx, client, nil, refs, types.NamespacedName{}) // a backup acts on nothing: no stop switch
	if err != nil {
		return err
	}
	// At backup time the cluster is live: judge by the API's readiness.
	nodes := map[string]NodeHealth{}
	for _, n := range s.nodes {
		nodes[n.Name] = NodeHealth{Ready: kubestatus.NodeReady(n), Heartbeat: true}
	}
	for _, r := range refs {
		ws := s.evaluate(r, nodes)
		bw := BackupWorkload{Workload: r, State: ws.State, Message: ws.Message}
		for _, p := range s.podsOf(r) {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !slices.Contains(bw.Nodes, p.Spec.NodeName) {
				bw.Nodes = append(bw.Nodes, p.Spec.NodeName)
			}
		}
		slices.Sort(bw.Nodes)
		m.EssentialWorkloads = append(m.EssentialWorkloads, bw)
	}
	return nil
}

// ReadMetadata reads a snapshot's metadata file.
func ReadMetadata(snapshot string) (*Metadata, error) {
	data, err := os.ReadFile(snapshot + MetadataSuffix)
	if err != nil {
		return nil, err
	}
	var m Metadata
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", snapshot+MetadataSuffix, err)
	}
	if m.Kind != MetadataKind {
		return nil, fmt.Errorf("%s: kind %q is not %s", snapshot+MetadataSuffix, m.Kind, MetadataKind)
	}
	return &m, nil
}

// writeJSONNew writes v to a new file, atomically: a temporary file linked
// into place, so that an existing file is never replaced.
func writeJSONNew(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s appeared meanwhile: not replaced", path)
		}
		return err
	}
	return nil
}
