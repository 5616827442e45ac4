package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/etcdsnapshot"
	"rebound/pkg/kubestatus"
	"rebound/pkg/restore"
)

// S2 is seed 000's platform restore: an etcd backup of a 5-node cluster is
// restored with only node-0 (controller-0) alive. The essential
// Deployments' pods sat on nodes 1-4, the zone goes PartialDisruption
// (4 of 5 NotReady), upstream evicts nothing, and a status-based wait on
// those Deployments times out. `rebound restore bringup` reschedules them
// and they are Available within its deadline. The e2e test
// TestS2PlatformRestore proves the same on the same setup.

// S2Workloads are the stand-ins of the seed's essential services, each
// preferring one of the nodes that will be down after the restore.
func S2Workloads(nodes []string) []Workload {
	names := []string{"calico-kube-controllers", "coredns", "tiller-deploy"}
	out := make([]Workload, len(names))
	for i, n := range names {
		out[i] = Workload{Namespace: "kube-system", Name: n, PreferNode: nodes[(i+2)%len(nodes)], PriorityClass: "system-cluster-critical"}
	}
	return out
}

// S2Deadline is the bring-up deadline for a sandbox with these timings:
// the node grace period (a dead node must first be seen NotReady) plus
// 33 s, plus 5 s per node. With FastTimings and 5 nodes that is the e2e
// test's 70 s. The same deadline bounds the wait without rebound.
func S2Deadline(t sandbox.Timings) restore.Deadline {
	return restore.Deadline{Base: t.NodeMonitorGracePeriod + 33*time.Second, PerNode: 5 * time.Second}
}

// S2Options tune scenario S2.
type S2Options struct {
	// Workloads are the essential Deployments; nil means S2Workloads.
	Workloads []Workload
	// Survivor is the only node alive after the restore.
	Survivor string
	// Backup is where the etcd snapshot goes (must not exist).
	Backup string
	// Binaries restart the control plane on the restored data.
	Binaries sandbox.Binaries
	// Deadline bounds the wait; zero means S2Deadline(c.Timings).
	Deadline restore.Deadline
	// Bringup runs `rebound restore bringup` (pkg/restore) after the
	// restore; otherwise the restore is followed by a plain wait on the
	// Deployments' status, which is what the seed's restore did.
	Bringup bool
	// Progress gets the restore's and the bring-up's own lines; nil
	// discards them.
	Progress io.Writer
	// AfterBackup, if set, runs once the backup is written and before the
	// restore, on the still running cluster: a hook for a test's checks
	// (e.g. that bad snapshots are refused and change nothing).
	AfterBackup func(ctx context.Context, c *sandbox.Cluster, backup string) error
	// RestoreLock, if set, is held while the control plane restarts on
	// the backup: two lanes restore one after the other, since two
	// restarts at once can starve a small machine (each lane still counts
	// from its own timestamps).
	RestoreLock sync.Locker
}

// S2Result is what S2 found.
type S2Result struct {
	// RestoredAt is when the restored control plane was up with the
	// survivor heartbeating (timeline time): where the wait starts.
	RestoredAt time.Duration `json:"restoredAt"`
	// Recovered is true when every workload was Available (on Ready nodes,
	// as the bring-up counts them) within the deadline; RecoveredAt says
	// when.
	Recovered   bool          `json:"recovered"`
	RecoveredAt time.Duration `json:"recoveredAt"`
	// Available counts the workloads Available at the end.
	Available int `json:"available"`
	Workloads int `json:"workloads"`
	// Zone is the zone state kube-controller-manager last reported.
	Zone string `json:"zone"`
	// Bringup is the wait's (or bring-up's) own result.
	Bringup *restore.Result `json:"bringup"`
	// Backup is the backup's metadata.
	Backup *restore.Metadata `json:"backup"`
	// Recoveries are each workload's recovery from its node's NotReady
	// transition, read from the API's timestamps (workloads that were on
	// the survivor have none); Recovery is the slowest of them.
	Recoveries []Recovery `json:"recoveries"`
	Recovery   Recovery   `json:"recovery"`
}

// RunS2 plays S2 on a running sandbox (5 nodes for the seed's
// PartialDisruption; with one node nothing has to move): deploy the
// essential workloads on nodes other than the survivor, back up etcd,
// restore the backup with only the survivor alive, then wait (or bring up
// with rebound). c describes the restored sandbox afterwards.
func RunS2(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S2Options) (S2Result, error) {
	var res S2Result
	if !slices.Contains(c.NodeNames, opts.Survivor) {
		return res, fmt.Errorf("S2: no node %q in the sandbox (nodes are %v)", opts.Survivor, c.NodeNames)
	}
	ws := opts.Workloads
	if ws == nil {
		ws = S2Workloads(c.NodeNames)
	}
	deadline := opts.Deadline
	if deadline == (restore.Deadline{}) {
		deadline = S2Deadline(c.Timings)
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	refs := make([]restore.WorkloadRef, len(ws))
	for i, w := range ws {
		refs[i] = restore.WorkloadRef{Namespace: w.Namespace, Kind: restore.KindDeployment, Name: w.Name}
	}
	res.Workloads = len(ws)

	// Before the backup: the workloads available on their nodes.
	before, stop := watchS2(ctx, c, tl, ws)
	if err := deployAll(ctx, c, tl, before, ws); err != nil {
		stop()
		return res, err
	}
	var err error
	tl.Step("etcd backup (snapshot through the client API, with the essential workloads' metadata)")
	if res.Backup, err = restore.Backup(ctx, restore.BackupOptions{
		Etcd: etcdsnapshot.ClientOptions{Endpoint: c.EtcdURL}, Out: opts.Backup, Client: c.Client,
		Selection: restore.Selection{Workloads: refs},
	}); err != nil {
		stop()
		return res, fmt.Errorf("backup: %w", err)
	}
	stop() // the observer must not read c while Restore replaces it
	if opts.AfterBackup != nil {
		if err := opts.AfterBackup(ctx, c, opts.Backup); err != nil {
			return res, err
		}
	}

	tl.Step("platform restore: the control plane restarts on the backup with only %s alive", opts.Survivor)
	if opts.RestoreLock != nil {
		opts.RestoreLock.Lock()
	}
	err = c.Restore(ctx, sandbox.RestoreOptions{Snapshot: opts.Backup, Alive: []string{opts.Survivor}, Binaries: opts.Binaries, Progress: progress})
	if opts.RestoreLock != nil {
		opts.RestoreLock.Unlock()
	}
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	res.RestoredAt = tl.Since()
	after, stop := watchS2(ctx, c, tl, ws)
	defer stop()
	if opts.Bringup {
		tl.Step("rebound restore bringup (deadline %s + %s per node)", deadline.Base, deadline.PerNode)
	} else {
		tl.Step("wait on the Deployments' status (deadline %s + %s per node), as the seed's restore did", deadline.Base, deadline.PerNode)
	}
	br, err := restore.Bringup(ctx, restore.Options{
		Client: c.Client, Selection: restore.Selection{Workloads: refs}, Deadline: deadline,
		WaitOnly: !opts.Bringup, Progress: progress, ZoneConfig: c.Timings.ZoneConfig(),
	})
	if err != nil {
		return res, fmt.Errorf("bring-up: %w", err)
	}
	res.Bringup = br
	final := after.Snapshot()
	for _, z := range final.Zones {
		res.Zone = z
	}
	for _, w := range br.Workloads {
		if w.State == restore.StateAvailable {
			res.Available++
		}
	}
	for _, w := range ws {
		if w.PreferNode == opts.Survivor {
			continue
		}
		r, err := MeasureRecovery(ctx, c.Client, w, w.PreferNode, time.Now())
		if err != nil {
			return res, err
		}
		res.Recoveries = append(res.Recoveries, r)
	}
	res.Recovery = Slowest(res.Recoveries)
	if br.Outcome == restore.OutcomeSucceeded {
		res.Recovered = true
		res.RecoveredAt = res.RestoredAt + time.Duration(br.ElapsedSeconds*float64(time.Second))
		moved := ""
		if len(res.Recoveries) > 0 {
			moved = fmt.Sprintf("; the slowest replacement Ready %.1fs after its old node's NotReady transition", res.Recovery.Seconds)
		}
		tl.Step("all %d workloads Available on Ready nodes, %.1fs after the restore%s", len(ws), br.ElapsedSeconds, moved)
	} else {
		tl.Step("%s after %.0fs: %d/%d workloads Available, zone %s", br.Outcome, br.ElapsedSeconds, res.Available, len(ws), res.Zone)
	}
	return res, nil
}

// DeployOnPreferredNodes creates the Deployments and waits until each is
// available with its pod on the node it prefers: S2's starting point, for
// tests that drive the CLIs on the same setup.
func DeployOnPreferredNodes(ctx context.Context, c *sandbox.Cluster, tl *Timeline, ws []Workload) error {
	w, stop := watchS2(ctx, c, tl, ws)
	defer stop()
	return deployAll(ctx, c, tl, w, ws)
}

func deployAll(ctx context.Context, c *sandbox.Cluster, tl *Timeline, watch *s2Watch, ws []Workload) error {
	for _, w := range ws {
		tl.Step("create Deployment %s, preferring %s", w, w.PreferNode)
		if err := w.Create(ctx, c.Client); err != nil {
			return err
		}
	}
	_, err := watch.WaitFor(ctx, 2*time.Minute, "workloads available on their nodes", func(s s2Snapshot) bool {
		for _, w := range ws {
			if !s.workloadOn(w) {
				return false
			}
		}
		return true
	})
	return err
}

// s2Watch observes nodes and zones (through an Observer without a
// workload) and every S2 workload's pods and availability.
type s2Watch struct {
	obs *Observer
	tl  *Timeline
	ws  []Workload

	mu    sync.Mutex
	pods  map[string]PodState
	avail map[string]string
	seen  bool
}

// s2Snapshot adds the workloads' pods to the observer's snapshot.
type s2Snapshot struct {
	Snapshot
	pods map[string]PodState
}

func (s s2Snapshot) workloadOn(w Workload) bool {
	for name, p := range s.pods {
		if strings.HasPrefix(name, w.Name+"-") && p.Node == w.PreferNode && p.Ready && !p.Terminating {
			return true
		}
	}
	return false
}

func watchS2(ctx context.Context, c *sandbox.Cluster, tl *Timeline, ws []Workload) (*s2Watch, func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &s2Watch{obs: Observe(ctx, c, tl, Workload{}), tl: tl, ws: ws, pods: map[string]PodState{}, avail: map[string]string{}}
	client := c.Client
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			w.poll(ctx, client)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w, func() { cancel(); <-done }
}

func (w *s2Watch) poll(ctx context.Context, client kubernetes.Interface) {
	pods := map[string]PodState{}
	avail := map[string]string{}
	for _, wl := range w.ws {
		d, err := client.AppsV1().Deployments(wl.Namespace).Get(ctx, wl.Name, metav1.GetOptions{})
		if err != nil {
			return
		}
		desired := int32(0)
		if d.Spec.Replicas != nil {
			desired = *d.Spec.Replicas
		}
		avail[wl.String()] = fmt.Sprintf("%d/%d available", d.Status.AvailableReplicas, desired)
		list, err := client.CoreV1().Pods(wl.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return
		}
		for i := range list.Items {
			p := &list.Items[i]
			pods[p.Name] = PodState{Name: p.Name, Node: p.Spec.NodeName, Ready: kubestatus.PodReady(p), Terminating: p.DeletionTimestamp != nil}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range sortedKeys(pods) {
		if old, ok := w.pods[name]; !ok || old != pods[name] {
			w.tl.Add("pod", name, "%s", podWords(pods[name]))
		}
	}
	for _, name := range sortedKeys(w.pods) {
		if _, ok := pods[name]; !ok && w.seen {
			w.tl.Add("pod", name, "deleted")
		}
	}
	names := make([]string, 0, len(avail))
	for n := range avail {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if w.avail[n] != avail[n] {
			w.tl.Add("workload", n, "%s", avail[n])
		}
	}
	w.pods, w.avail, w.seen = pods, avail, true
}

func (w *s2Watch) snapshot() s2Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	pods := make(map[string]PodState, len(w.pods))
	for k, v := range w.pods {
		pods[k] = v
	}
	return s2Snapshot{Snapshot: w.obs.Snapshot(), pods: pods}
}

// Snapshot is the latest observation of nodes and zones.
func (w *s2Watch) Snapshot() Snapshot { return w.obs.Snapshot() }

// WaitFor waits until cond holds.
func (w *s2Watch) WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(s2Snapshot) bool) (time.Duration, error) {
	var at time.Duration
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if cond(w.snapshot()) {
			at = w.tl.Since()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%s: not within %s: %w", what, timeout, err)
	}
	return at, nil
}
