package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/etcdsnapshot"
	"rebound/pkg/kubestatus"
	"rebound/pkg/restore"
)

// podNodes lists the nodes of a Deployment's live (non-terminating) pods.
func podNodes(ctx context.Context, c *sandbox.Cluster, w scenario.Workload) []string {
	pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out
}

// clusterFingerprint is what must not change when a command refuses to
// act: the essential namespace's pods (by UID, with their deletion state)
// and the Deployments' specs and annotations. Status may change: the
// control plane's own controllers keep running.
func clusterFingerprint(ctx context.Context, t *testing.T, c *sandbox.Cluster) string {
	t.Helper()
	var b strings.Builder
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range pods.Items {
		lines = append(lines, fmt.Sprintf("pod %s %s %s deleting=%v", p.Name, p.UID, p.Spec.NodeName, p.DeletionTimestamp != nil))
	}
	ds, err := c.Client.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds.Items {
		lines = append(lines, fmt.Sprintf("deployment %s gen=%d replicas=%d annotations=%v", d.Name, d.Generation, *d.Spec.Replicas, d.Annotations))
	}
	slices.Sort(lines)
	b.WriteString(strings.Join(lines, "\n"))
	return b.String()
}

// noExecuteTainted reports whether the node lifecycle controller tainted
// the node NoExecute (unreachable or not-ready).
func noExecuteTainted(ctx context.Context, t *testing.T, c *sandbox.Cluster, name string) bool {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoExecute && (taint.Key == corev1.TaintNodeUnreachable || taint.Key == corev1.TaintNodeNotReady) {
			return true
		}
	}
	return false
}

func bringupOutput(t *testing.T) io.Writer {
	if w := testWriter(t); w != nil {
		return w
	}
	return io.Discard
}

// TestS2PlatformRestore: 5 nodes, backup, restore with only node-0 alive,
// on two sandboxes at once (scenario.RunS2Pair, as the demo plays it).
// Without rebound the status-based wait times out; with `rebound restore
// bringup` every essential Deployment is Available within its deadline.
// Bad inputs (a truncated snapshot, a file that is not a snapshot, an
// unknown workload) are refused with a clear error and change nothing.
func TestS2PlatformRestore(t *testing.T) {
	t.Parallel()
	p := startPair(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 9*time.Minute)
	ws := scenario.S2Workloads(p.Without.NodeNames)
	var progress strings.Builder
	res, err := scenario.RunS2Pair(ctx, p, scenario.S2PairOptions{
		Survivor: "node-0",
		Binaries: binaries,
		Progress: func(rebound bool) io.Writer {
			if rebound {
				return io.MultiWriter(&lockedBuilder{b: &progress}, bringupOutput(t))
			}
			return bringupOutput(t)
		},
		AfterBackup: func(ctx context.Context, c *sandbox.Cluster, backup string) error {
			t.Run("bad snapshots are refused and the sandbox runs on unchanged", func(t *testing.T) {
				s2BadSnapshots(ctx, t, c, backup)
			})
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	results(t, res.Comparison.Write)
	t.Run("backup metadata", func(t *testing.T) {
		meta := res.Without.Backup
		if !slices.Equal(meta.Nodes, p.Without.NodeNames) || len(meta.EssentialWorkloads) != 3 || meta.Revision == 0 {
			t.Errorf("backup metadata: nodes %v, %d workloads, revision %d; want the 5 nodes, 3 workloads", meta.Nodes, len(meta.EssentialWorkloads), meta.Revision)
		}
		for _, bw := range meta.EssentialWorkloads {
			if bw.State != restore.StateAvailable || len(bw.Nodes) != 1 || bw.Nodes[0] == "node-0" {
				t.Errorf("backup metadata: %+v, want available on one of nodes 1-4", bw)
			}
		}
	})
	t.Run("without rebound the wait times out", func(t *testing.T) {
		s2CheckWithout(ctx, t, p.Without, ws, res.Without)
	})
	t.Run("unknown workload is refused and changes nothing", func(t *testing.T) {
		c := p.Without
		before := clusterFingerprint(ctx, t, c)
		bad := append(refsOf(ws), restore.WorkloadRef{Namespace: "kube-system", Kind: restore.KindDeployment, Name: "corednz"})
		r, err := restore.Bringup(ctx, restore.Options{Client: c.Client, Selection: restore.Selection{Workloads: bad}, Deadline: scenario.S2Deadline(c.Timings)})
		if r != nil || restore.ExitCodeOf(err) != restore.ExitBadInput {
			t.Fatalf("bring-up with an unknown workload: result %v, err %v (exit %d), want bad input (exit 2)", r, err, restore.ExitCodeOf(err))
		}
		for _, want := range []string{"Deployment kube-system/corednz not found", "coredns", "nothing changed"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if after := clusterFingerprint(ctx, t, c); after != before {
			t.Errorf("the cluster changed although the bring-up was refused:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
	t.Run("with rebound every essential Deployment is available on node-0", func(t *testing.T) {
		s2CheckWith(ctx, t, p.With, ws, res.With, progress.String())
	})
}

func refsOf(ws []scenario.Workload) []restore.WorkloadRef {
	out := make([]restore.WorkloadRef, len(ws))
	for i, w := range ws {
		out[i] = restore.WorkloadRef{Namespace: w.Namespace, Kind: restore.KindDeployment, Name: w.Name}
	}
	return out
}

// lockedBuilder is a strings.Builder safe for the bring-up's writes.
type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func s2CheckWithout(ctx context.Context, t *testing.T, c *sandbox.Cluster, ws []scenario.Workload, res scenario.S2Result) {
	without := res.Bringup
	if without.Outcome != restore.OutcomeTimedOut || without.ExitCode != restore.ExitTimeout {
		t.Fatalf("without rebound: outcome %s (exit %d), want the seed's timeout: %s", without.Outcome, without.ExitCode, without.Message)
	}
	if len(without.Zones) != 1 || without.Zones[0].State != "PartialDisruption" {
		t.Errorf("zones = %+v, want one in PartialDisruption", without.Zones)
	}
	if st, err := c.ZoneState(c.ZoneKey); err != nil || st != "PartialDisruption" {
		t.Errorf("kube-controller-manager's last zone state = %q (%v), want PartialDisruption", st, err)
	}
	// The dead nodes go NotReady in the same pass of the node lifecycle
	// controller (monitorNodeHealth handles nodes in parallel and queues
	// each for a NoExecute taint at the zone's rate, still Normal's: 0.1/s,
	// burst 1), but the zone only switches to PartialDisruption, rate 0, at
	// the end of the pass (handleDisruption), and the tainting loop runs on
	// its own every 100ms. So the first node queued may be tainted in
	// between, and its pods evicted after their toleration: the race
	// TestS1RaceAllNodesDieAtOnce shows. At most one workload comes back
	// that way; the wait on all of them times out.
	refs := refsOf(ws)
	state := map[restore.WorkloadRef]restore.State{}
	for _, w := range without.Workloads {
		state[w.Ref] = w.State
	}
	evictedBeforeFlip := 0
	for i, w := range ws {
		if state[refs[i]] != restore.StateAvailable {
			if got := podNodes(ctx, c, w); !slices.Equal(got, []string{w.PreferNode}) {
				t.Errorf("without rebound %s is not available but its pods are on %v, want still on the dead %s", w, got, w.PreferNode)
			}
			continue
		}
		evictedBeforeFlip++
		if !noExecuteTainted(ctx, t, c, w.PreferNode) {
			t.Errorf("without rebound %s came back although %s was never tainted NoExecute", w, w.PreferNode)
		}
	}
	if evictedBeforeFlip > 1 {
		t.Errorf("without rebound %d workloads came back; upstream's taint rate in a Normal zone (burst 1) allows at most one before the zone flips", evictedBeforeFlip)
	}
	metric(t, "s2_without_rebound_evicted_before_zone_flip", float64(evictedBeforeFlip), "workloads")
}

func s2CheckWith(ctx context.Context, t *testing.T, c *sandbox.Cluster, ws []scenario.Workload, res scenario.S2Result, progress string) {
	with := res.Bringup
	if with.Outcome != restore.OutcomeSucceeded || with.ExitCode != restore.ExitOK || with.Err() != nil {
		t.Fatalf("bring-up: outcome %s (exit %d): %s", with.Outcome, with.ExitCode, with.Message)
	}
	if with.ElapsedSeconds > with.DeadlineSeconds {
		t.Errorf("bring-up took %.1fs, beyond its deadline %.0fs", with.ElapsedSeconds, with.DeadlineSeconds)
	}
	if !res.Recovery.Recovered || len(res.Recoveries) != len(ws) {
		t.Errorf("recoveries from the API's timestamps = %+v, want all %d workloads recovered", res.Recoveries, len(ws))
	}
	deletes := 0
	for _, a := range with.Actions {
		if a.Kind == "Delete" {
			deletes++
		}
	}
	if deletes != len(ws) {
		t.Errorf("actions = %+v, want one Delete per stranded pod", with.Actions)
	}
	// Checked again, independently of the command: each Deployment's status
	// says available, and its pod runs on node-0.
	for _, w := range ws {
		d, err := c.Client.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.AvailableReplicas != 1 || d.Status.ObservedGeneration < d.Generation {
			t.Errorf("%s status after the bring-up: %+v", w, d.Status)
		}
		if got := podNodes(ctx, c, w); !slices.Equal(got, []string{"node-0"}) {
			t.Errorf("%s pods on %v, want node-0", w, got)
		}
	}
	events, err := c.Client.EventsV1().Events("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, e := range events.Items {
		if e.ReportingController == "rebound.dev/restore-bringup" && e.Reason == "StrandedPodDeleted" && e.Regarding.Kind == "Deployment" {
			recorded++
		}
	}
	if recorded != len(ws) {
		t.Errorf("%d StrandedPodDeleted Events from the bring-up, want one per stranded pod", recorded)
	}
	if strings.Contains(progress, "not recorded") {
		t.Errorf("an Event was not recorded:\n%s", progress)
	}
	for _, want := range []string{"PartialDisruption", "on NotReady node", "Delete kube-system/", "bring-up succeeded"} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress output lacks %q:\n%s", want, progress)
		}
	}
	metric(t, "s2_bringup_with_rebound", with.ElapsedSeconds, "s")
}

// s2BadSnapshots: a truncated snapshot and a file of another kind are
// refused by `restore etcd` (target untouched) and by the sandbox's
// restore (the sandbox keeps running on its data).
func s2BadSnapshots(ctx context.Context, t *testing.T, c *sandbox.Cluster, backup string) {
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.db")
	if err := os.WriteFile(truncated, data[:len(data)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	wrongKind := backup + restore.MetadataSuffix // JSON, not a snapshot
	apiserver := c.APIServerURL
	for _, tc := range []struct {
		path string
		want error
	}{{truncated, etcdsnapshot.ErrCorrupt}, {wrongKind, etcdsnapshot.ErrNotSnapshot}} {
		target := filepath.Join(dir, "restored-"+filepath.Base(tc.path))
		_, err := etcdsnapshot.Restore(etcdsnapshot.RestoreOptions{Snapshot: tc.path, DataDir: target})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("restore etcd %s: err = %v, want %v naming the file", filepath.Base(tc.path), err, tc.want)
		}
		if _, serr := os.Stat(target); !os.IsNotExist(serr) {
			t.Errorf("restore etcd %s created %s", filepath.Base(tc.path), target)
		}
		t.Logf("restore etcd %s: %v", filepath.Base(tc.path), err)

		err = c.Restore(ctx, sandbox.RestoreOptions{Snapshot: tc.path, Alive: []string{"node-0"}, Binaries: binaries})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "runs on unchanged") {
			t.Errorf("sandbox restore of %s: err = %v, want %v", filepath.Base(tc.path), err, tc.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left next to the targets: %v", entries)
	}
	// The sandbox was never stopped: same apiserver, all nodes Ready.
	if c.APIServerURL != apiserver {
		t.Errorf("apiserver moved from %s to %s: the sandbox was restarted", apiserver, c.APIServerURL)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("sandbox not serving after refused restores: %v", err)
	}
	for i := range nodes.Items {
		if !kubestatus.NodeReady(&nodes.Items[i]) {
			t.Errorf("node %s not Ready after refused restores", nodes.Items[i].Name)
		}
	}
}

// TestS2SingleNodeRestore: the same scenario runner on a one-node sandbox,
// where nothing has to move: the bring-up passes quickly with no action
// (the seed's fix was tested on one node too).
func TestS2SingleNodeRestore(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 5*time.Minute)
	res, err := scenario.RunS2(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S2Options{
		Survivor: "node-0", Backup: filepath.Join(t.TempDir(), "aio-sx.db"), Binaries: binaries, Bringup: true, Progress: bringupOutput(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	br := res.Bringup
	if br.Outcome != restore.OutcomeSucceeded || len(br.Actions) != 0 {
		t.Fatalf("single-node bring-up: %s with actions %+v: %s", br.Outcome, br.Actions, br.Message)
	}
	for _, w := range br.Workloads {
		if w.State != restore.StateAvailable || w.Live != 1 {
			t.Errorf("%s: %s %s", w.Ref.Display(), w.State, w.Message)
		}
	}
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: phase %s, deleting %v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
		}
	}
	metric(t, "s2_single_node_bringup_with_rebound", br.ElapsedSeconds, "s")
}
