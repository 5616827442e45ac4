package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/restore"
)

type cliRun struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary without KUBECONFIG, so that only flags count.
func runCLI(ctx context.Context, t *testing.T, bin string, args ...string) cliRun {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	err := cmd.Run()
	r := cliRun{stdout: o.String(), stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

func (r cliRun) expect(t *testing.T, what string, code int, stderrHas ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", what, r.code, code, r.stdout, r.stderr)
		return
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("%s: stderr lacks %q:\n%s", what, s, r.stderr)
		}
	}
}

// TestS2RestoreCLI drives the real `rebound backup`, `rebound restore etcd`
// and `rebound restore bringup` on a one-node sandbox and checks their exit
// codes: 0 for success, 2 for every bad input (truncated snapshot, a file
// that is not a snapshot, a non-empty target, an unknown workload, an
// existing backup file), 4 for a suspended policy and for the stop switch,
// each with a clear message and nothing changed.
func TestS2RestoreCLI(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	bin := reboundBinary // built by TestMain
	c := startSandbox(t, 1, sandbox.FastTimings())
	ws := scenario.S2Workloads(c.NodeNames)
	if err := scenario.DeployOnPreferredNodes(ctx, c, scenario.NewTimeline(testWriter(t)), ws); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	backup := filepath.Join(dir, "backup.db")
	workloadFlags := []string{}
	for _, r := range refsOf(ws) {
		workloadFlags = append(workloadFlags, "--workload", r.String())
	}

	// backup
	r := runCLI(ctx, t, bin, append([]string{"backup", "--etcd-endpoint", c.EtcdURL, "--out", backup, "--kubeconfig", c.Kubeconfig}, workloadFlags...)...)
	r.expect(t, "backup", 0)
	m, err := restore.ReadMetadata(backup)
	if err != nil || len(m.Nodes) != 1 || len(m.EssentialWorkloads) != 3 {
		t.Fatalf("metadata = %+v, %v", m, err)
	}
	if !strings.Contains(r.stdout, "essential Deployment kube-system/coredns: Available, pods on node-0") {
		t.Errorf("backup output:\n%s", r.stdout)
	}
	runCLI(ctx, t, bin, "backup", "--etcd-endpoint", c.EtcdURL, "--out", backup).expect(t, "backup over an existing file", 2, "already exists")

	// restore etcd: bad snapshots and targets are refused, exit 2.
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.db")
	if err := os.WriteFile(truncated, data[:len(data)-4096], 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "etcd-restored")
	runCLI(ctx, t, bin, "restore", "etcd", "--snapshot", truncated, "--data-dir", target).
		expect(t, "restore etcd of a truncated snapshot", 2, "corrupt or truncated etcd snapshot", "left untouched")
	runCLI(ctx, t, bin, "restore", "etcd", "--snapshot", backup+restore.MetadataSuffix, "--data-dir", target).
		expect(t, "restore etcd of a JSON file", 2, "not an etcd snapshot")
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a refused restore created %s", target)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	runCLI(ctx, t, bin, "restore", "etcd", "--snapshot", backup, "--data-dir", full).
		expect(t, "restore etcd into a non-empty dir", 2, "restore target is not empty")
	r = runCLI(ctx, t, bin, "restore", "etcd", "--snapshot", backup, "--data-dir", target, "--name", "sandbox", "-o", "json")
	r.expect(t, "restore etcd", 0)
	var er struct {
		Snapshot struct{ Revision int64 }
		Metadata *restore.Metadata `json:"backupMetadata"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &er); err != nil || er.Snapshot.Revision != m.Revision || er.Metadata == nil {
		t.Errorf("restore etcd -o json: %v\n%s", err, r.stdout)
	}
	if _, err := os.Stat(filepath.Join(target, "member", "snap", "db")); err != nil {
		t.Errorf("restored data dir lacks member/snap/db: %v", err)
	}

	// bring-up on the sandbox restored from that backup.
	if err := c.Restore(ctx, sandbox.RestoreOptions{Snapshot: backup, Alive: []string{"node-0"}, Binaries: binaries, Progress: testWriter(t)}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	before := clusterFingerprint(ctx, t, c)
	runCLI(ctx, t, bin, "restore", "bringup", "--kubeconfig", c.Kubeconfig, "--workload", "kube-system/deployment/corednz").
		expect(t, "bring-up of an unknown workload", 2, "Deployment kube-system/corednz not found", "coredns")
	runCLI(ctx, t, bin, "restore", "bringup", "--kubeconfig", c.Kubeconfig, "--workload", "kube-system/cronjob/x").
		expect(t, "bring-up of an unknown kind", 2, "not one of deployment, daemonset, statefulset")
	if after := clusterFingerprint(ctx, t, c); after != before {
		t.Errorf("refused bring-ups changed the cluster:\n%s\n---\n%s", before, after)
	}

	// The default policy selects the three stand-ins (kube-system,
	// system-cluster-critical).
	r = runCLI(ctx, t, bin, "restore", "bringup", "--kubeconfig", c.Kubeconfig, "--policy", repoPath("deploy/policy/default-recoverypolicy.yaml"), "--dry-run", "-o", "json")
	r.expect(t, "bring-up --policy --dry-run", 0)
	var dry restore.Result
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil || dry.Outcome != restore.OutcomeDryRun || len(dry.Workloads) != 3 {
		t.Errorf("dry run -o json: %v\n%s", err, r.stdout)
	}
	// Refusals that change nothing: a suspended policy without
	// --ignore-suspend, and the controller's stop switch pulled. Both exit
	// 4 (refused as unsafe).
	policy, err := os.ReadFile(repoPath("deploy/policy/default-recoverypolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	suspended := filepath.Join(dir, "suspended.yaml")
	if err := os.WriteFile(suspended, []byte(strings.Replace(string(policy), "\nspec:\n", "\nspec:\n  suspend: true\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	before = clusterFingerprint(ctx, t, c)
	runCLI(ctx, t, bin, "restore", "bringup", "--kubeconfig", c.Kubeconfig, "--policy", suspended).
		expect(t, "bring-up of a suspended policy", 4, "is suspended (spec.suspend: true)", "--ignore-suspend")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rebound-system"}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	stop := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rebound-system", Name: "rebound-stop"}}
	if _, err := c.Client.CoreV1().ConfigMaps("rebound-system").Create(ctx, stop, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = runCLI(ctx, t, bin, append([]string{"restore", "bringup", "--kubeconfig", c.Kubeconfig, "-o", "json"}, workloadFlags...)...)
	r.expect(t, "bring-up with the stop switch pulled", 4, "stop switch ConfigMap rebound-system/rebound-stop")
	var stopped restore.Result
	if err := json.Unmarshal([]byte(r.stdout), &stopped); err != nil || stopped.Outcome != restore.OutcomeStopped || !stopped.StopSwitchPulled {
		t.Errorf("stopped bring-up -o json: %v\n%s", err, r.stdout)
	}
	if err := c.Client.CoreV1().ConfigMaps("rebound-system").Delete(ctx, stop.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if after := clusterFingerprint(ctx, t, c); after != before {
		t.Errorf("refused bring-ups changed the cluster:\n%s\n---\n%s", before, after)
	}

	args := append([]string{"restore", "bringup", "--kubeconfig", c.Kubeconfig, "--timeout-base", "45s", "-o", "json"}, workloadFlags...)
	r = runCLI(ctx, t, bin, args...)
	r.expect(t, "bring-up", 0)
	var res restore.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Outcome != restore.OutcomeSucceeded || res.ExitCode != 0 {
		t.Errorf("bring-up -o json: %v\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "bring-up succeeded") {
		t.Errorf("progress (stderr with -o json) lacks the summary:\n%s", r.stderr)
	}
}
