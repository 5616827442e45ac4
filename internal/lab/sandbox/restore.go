package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/pkg/etcdsnapshot"
	"rebound/pkg/kubestatus"
	"rebound/pkg/zone"
)

// A platform restore, as in seed 000: the control plane comes back from an
// etcd snapshot on the surviving node(s) while the other nodes are still
// down. Their Node objects, Leases and pods are in the snapshot, Ready as
// they were at backup time, but nothing heartbeats for them any more.

// RestoreOptions describe a restore of a running sandbox.
type RestoreOptions struct {
	// Snapshot is an etcd snapshot, e.g. from Backup.
	Snapshot string
	// Alive are the nodes whose heartbeats run after the restore; every
	// other node of the snapshot stays dead. At least one.
	Alive []string
	// Binaries, Progress, ExtraArgs and Detached are as in Options.
	Binaries  Binaries
	Progress  io.Writer
	ExtraArgs map[string][]string
	Detached  bool
}

// restoreSpec is what Start needs to know of a restore.
type restoreSpec struct {
	alive map[string]bool
}

// etcdMemberName and etcdRestorePeerURL are the member a restored data dir
// describes. etcd reads its membership from the data dir on a restart and
// ignores the --initial-* flags, so the peer URL need not be the port Start
// picks; it must only be well formed.
const (
	etcdMemberName     = "sandbox"
	etcdRestorePeerURL = "http://127.0.0.1:2380"
)

// Backup takes an etcd snapshot of the running sandbox through etcd's
// snapshot API, into path (which must not exist).
func (c *Cluster) Backup(ctx context.Context, path string) (etcdsnapshot.SaveResult, error) {
	if c.EtcdURL == "" {
		return etcdsnapshot.SaveResult{}, errors.New("sandbox: etcd's client URL is unknown (sandbox started by an older rebound?)")
	}
	return etcdsnapshot.Save(ctx, etcdsnapshot.ClientOptions{Endpoint: c.EtcdURL}, path)
}

// Restore replaces the sandbox's state with a snapshot: it verifies the
// snapshot and restores it into a fresh etcd data dir (nothing is stopped
// if that fails), stops the control plane, swaps the data dir in and starts
// the control plane again on it, with the same certificates (so restored
// service-account tokens stay valid) and only opts.Alive heartbeating: the
// other nodes' heartbeat label is set to off right after the apiserver is
// up, before any controller or kwok runs. It returns once every alive node
// has renewed its Lease. c then describes the restarted sandbox (new
// ports, new client); if the start fails, c is stopped.
func (c *Cluster) Restore(ctx context.Context, opts RestoreOptions) error {
	if len(opts.Alive) == 0 {
		return errors.New("sandbox: restore needs at least one alive node")
	}
	alive := map[string]bool{}
	for _, n := range opts.Alive {
		if len(c.NodeNames) > 0 && !slices.Contains(c.NodeNames, n) {
			return fmt.Errorf("sandbox: restore: no node %q (nodes are %v); nothing changed", n, c.NodeNames)
		}
		alive[n] = true
	}
	if m := opts.Binaries.missing(); len(m) > 0 {
		return fmt.Errorf("sandbox: binaries missing in %q: %v", opts.Binaries.Dir, m)
	}
	region, zoneName, ok := zone.SplitZoneKey(c.ZoneKey)
	if !ok {
		return fmt.Errorf("sandbox: restore: cannot read the zone key %q", c.ZoneKey)
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}

	etcdDir := filepath.Join(c.Dir, "etcd")
	staged := etcdDir + ".restored"
	if err := os.RemoveAll(staged); err != nil { // left by an interrupted restore
		return fmt.Errorf("sandbox: %w", err)
	}
	info, err := etcdsnapshot.Restore(etcdsnapshot.RestoreOptions{
		Snapshot: opts.Snapshot, DataDir: staged, Name: etcdMemberName, PeerURL: etcdRestorePeerURL,
	})
	if err != nil {
		return fmt.Errorf("sandbox: restore refused, the sandbox runs on unchanged: %w", err)
	}
	fmt.Fprintf(progress, "  snapshot %s verified (revision %d, %d keys) and restored into a new data dir\n", opts.Snapshot, info.Revision, info.TotalKeys)

	if err := c.Stop(); err != nil {
		os.RemoveAll(staged)
		return fmt.Errorf("sandbox: restore: stop the control plane: %w", err)
	}
	old := etcdDir + ".replaced"
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if err := os.Rename(etcdDir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox: restore: %w", err)
	}
	if err := os.Rename(staged, etcdDir); err != nil {
		return fmt.Errorf("sandbox: restore: %w", err)
	}
	_ = os.RemoveAll(old)
	fmt.Fprintf(progress, "  control plane stopped; starting it on the restored data dir with %s alive\n", strings.Join(opts.Alive, ", "))

	nc, err := Start(ctx, Options{
		Dir:       c.Dir,
		Binaries:  opts.Binaries,
		Nodes:     len(alive),
		Region:    region,
		Zone:      zoneName,
		Timings:   c.Timings,
		Detached:  opts.Detached,
		Progress:  progress,
		ExtraArgs: opts.ExtraArgs,
		restore:   &restoreSpec{alive: alive},
	})
	if err != nil {
		return fmt.Errorf("sandbox: restore: %w", err)
	}
	*c = *nc
	return nil
}

// setRestoredHeartbeats labels every node of the restored etcd: on for the
// alive ones, off for the others, so that kwok, which manages only nodes
// labeled on, never renews a dead node's Lease. It runs before kwok starts.
func (c *Cluster) setRestoredHeartbeats(ctx context.Context, spec *restoreSpec) error {
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("sandbox: list restored nodes: %w", err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b) // node-2 before node-10
		}
		return strings.Compare(a, b)
	})
	for n := range spec.alive {
		if !slices.Contains(names, n) {
			return fmt.Errorf("sandbox: restore: node %q is not in the snapshot (its nodes: %v)", n, names)
		}
	}
	c.NodeNames = names
	for _, n := range list.Items {
		want := heartbeatOff
		if spec.alive[n.Name] {
			want = heartbeatOn
		}
		if n.Labels[HeartbeatLabel] == want {
			continue
		}
		if err := c.setHeartbeat(ctx, n.Name, want); err != nil {
			return err
		}
	}
	return nil
}

// waitRestoredNodes waits until every alive node has renewed its Lease
// since the restart and is Ready. A Ready condition alone proves nothing:
// it was restored from the snapshot.
func (c *Cluster) waitRestoredNodes(ctx context.Context, spec *restoreSpec, since time.Time) error {
	// kwok may first wait for a Lease restored from the snapshot to expire.
	timeout := c.Timings.NodeLeaseDuration + c.Timings.NodeMonitorGracePeriod + time.Minute
	for name := range spec.alive {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(since) {
				return false, nil //nolint:nilerr // keep polling until kwok renews it
			}
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && kubestatus.NodeReady(n), nil
		})
		if err != nil {
			return fmt.Errorf("sandbox: restored node %s did not heartbeat within %s (see %s): %w", name, timeout, c.LogPath(Kwok), err)
		}
	}
	return nil
}

// loadPKI finds the certificates a previous Start generated in dir.
func loadPKI(dir string) (*pki, error) {
	f := func(name string) string { return filepath.Join(dir, name) }
	p := &pki{
		dir:                  dir,
		CACert:               f("ca.crt"),
		CAKey:                f("ca.key"),
		FrontProxyCACert:     f("front-proxy-ca.crt"),
		FrontProxyClientCert: f("front-proxy-client.crt"),
		FrontProxyClientKey:  f("front-proxy-client.key"),
		ServingCert:          f("apiserver.crt"),
		ServingKey:           f("apiserver.key"),
		ServiceAccountKey:    f("sa.key"),
		ServiceAccountPub:    f("sa.pub"),
		clients:              map[string]clientCert{},
	}
	files := []string{p.CACert, p.CAKey, p.FrontProxyCACert, p.FrontProxyClientCert, p.FrontProxyClientKey, p.ServingCert, p.ServingKey, p.ServiceAccountKey, p.ServiceAccountPub}
	for _, id := range sandboxIdentities {
		cc := clientCert{Cert: f(id.file + ".crt"), Key: f(id.file + ".key")}
		p.clients[id.file] = cc
		files = append(files, cc.Cert, cc.Key)
	}
	for _, path := range files {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s is missing: a restore reuses the sandbox's certificates (start a new sandbox instead): %w", path, err)
		}
	}
	return p, nil
}
