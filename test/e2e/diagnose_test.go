package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/agent"
	"rebound/internal/cli"
	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/diagnose"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// The diagnose tests run `rebound diagnose` in-process (diagnose.Run, what
// the command calls) and, for exit codes and stderr, as the kubectl
// plugin binary, against the sandbox in the situations of S1, S4 and S5.
// rebound's controller does not run: diagnose must name the cause and what
// rebound would do, from the cluster alone.

// kubeconfigREST reads a kubeconfig file, as the diagnose command does
// with --kubeconfig, for the in-process runs.
func kubeconfigREST(t *testing.T, path string) *rest.Config {
	t.Helper()
	k := cli.NewKubeFlags()
	k.KubeConfig = path
	cfg, err := k.RESTConfig("rebound-diagnose")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
)

// kubectlRebound builds cmd/kubectl-rebound once: the same diagnose
// command as `rebound diagnose`, as its own process.
func kubectlRebound(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		dir := filepath.Dir(reboundBinary)
		pluginPath = filepath.Join(dir, "kubectl-rebound")
		cmd := exec.Command("go", "build", "-o", pluginPath, "rebound/cmd/kubectl-rebound")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			pluginErr = fmt.Errorf("build kubectl-rebound: %v\n%s", err, out.String())
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginPath
}

// pluginRun runs `kubectl-rebound diagnose ARGS` and returns its stdout,
// stderr and exit code.
func pluginRun(ctx context.Context, t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, kubectlRebound(t), append([]string{"diagnose"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run kubectl-rebound: %v", err)
	}
	return o.String(), e.String(), code
}

// bindDiagnoseRole applies deploy/rbac and binds the read-only ClusterRole
// rebound-diagnose (and nothing else) to the sandbox user "rebound", then
// waits until the apiserver's authorizer lets it list pods.
func bindDiagnoseRole(ctx context.Context, t *testing.T, c *sandbox.Cluster, cl client.Client) {
	t.Helper()
	applyFiles(ctx, t, cl, false, repoPath("deploy/controller/namespace.yaml"))
	applyFiles(ctx, t, cl, false, rbacFiles()...)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rebound-diagnose-e2e"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: sandbox.ReboundUser}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rebound-diagnose"},
	}
	if err := cl.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, _, last = diagnose.Run(ctx, diagnose.Options{Config: kubeconfigREST(t, c.ReboundKubeconfig)})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("the rebound-diagnose ClusterRole does not let diagnose read the cluster: %v", last)
	}
}

// diagnoseUntil runs diagnose with opts every second until cond holds, and
// returns that report and its exit code.
func diagnoseUntil(ctx context.Context, t *testing.T, opts diagnose.Options, timeout time.Duration, what string, cond func(diagnose.Report) bool) (diagnose.Report, int) {
	t.Helper()
	var r diagnose.Report
	var code int
	var runErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		r, code, runErr = diagnose.Run(ctx, opts)
		return runErr == nil && cond(r), nil
	})
	if err != nil {
		var buf bytes.Buffer
		_ = diagnose.WriteText(&buf, r)
		t.Fatalf("diagnose never showed %s (last error %v); last report:\n%s", what, runErr, buf.String())
	}
	return r, code
}

// logReport prints the human report (with -v) so that a run shows it.
func logReport(t *testing.T, r diagnose.Report) {
	t.Helper()
	var buf bytes.Buffer
	if err := diagnose.WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("rebound diagnose:\n%s", buf.String())
}

func criticalPod(r diagnose.Report, ns, workload string) *diagnose.CriticalPod {
	for i := range r.CriticalPods {
		if cp := &r.CriticalPods[i]; cp.Namespace == ns && cp.Workload.Name == workload {
			return cp
		}
	}
	return nil
}

func workloadOf(r diagnose.Report, kind, ns, name string) *diagnose.Workload {
	for i := range r.Workloads {
		if w := &r.Workloads[i]; w.Kind == kind && w.Namespace == ns && w.Name == name {
			return w
		}
	}
	return nil
}

// TestDiagnoseUnreachable: an API server that is not there (a closed
// loopback port) is said in one line, with exit code 2, within seconds.
func TestDiagnoseUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 2*time.Minute)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	l.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "`+server+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: gone, context: {cluster: gone, user: u}}]
current-context: gone
`), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "cannot reach the Kubernetes API at " + server + ": connection refused"

	_, code, err := diagnose.Run(ctx, diagnose.Options{Config: kubeconfigREST(t, kubeconfig)})
	if code != diagnose.ExitCannotRead || err == nil || err.Error() != want {
		t.Errorf("in-process: code %d, error %v; want %d and %q", code, err, diagnose.ExitCannotRead, want)
	}

	kubectlRebound(t) // built before the clock starts
	start := time.Now()
	stdout, stderr, code := pluginRun(ctx, t, "--kubeconfig", kubeconfig, "-o", "json")
	took := time.Since(start)
	metric(t, "diagnose_unreachable_fails_after", took.Seconds(), "s")
	if code != 2 || stderr != "error: "+want+"\n" || stdout != "" {
		t.Errorf("kubectl-rebound diagnose: exit %d, stderr %q, stdout %q; want exit 2 and one line %q", code, stderr, stdout, want)
	}
	if took > 30*time.Second {
		t.Errorf("took %s to say the API server is unreachable", took)
	}
}

// TestDiagnoseTooFewRights: the sandbox's "rebound" identity has no rights
// until bound: diagnose says which list it may not do, in one line, exit 2.
// Bound to rebound-diagnose alone (get/list/watch), it reads everything;
// without the RecoveryPolicy CRD it says so and uses the default policy.
func TestDiagnoseTooFewRights(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 2, sandbox.FastTimings())
	ctx := testContext(t, 2*time.Minute)
	want := `not allowed to list nodes cluster-wide as user "rebound": grant the rebound-diagnose ClusterRole (deploy/rbac)`

	_, code, err := diagnose.Run(ctx, diagnose.Options{Config: kubeconfigREST(t, c.ReboundKubeconfig)})
	if code != diagnose.ExitCannotRead || err == nil || err.Error() != want {
		t.Errorf("in-process: code %d, error %v; want %d and %q", code, err, diagnose.ExitCannotRead, want)
	}
	stdout, stderr, code := pluginRun(ctx, t, "--kubeconfig", c.ReboundKubeconfig)
	if code != 2 || stderr != "error: "+want+"\n" || stdout != "" {
		t.Errorf("kubectl-rebound diagnose: exit %d, stderr %q, stdout %q; want exit 2 and one line %q", code, stderr, stdout, want)
	}

	cl := newClient(t, c)
	bindDiagnoseRole(ctx, t, c, cl)
	stdout, stderr, code = pluginRun(ctx, t, "--kubeconfig", c.ReboundKubeconfig, "-o", "json")
	var r diagnose.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("exit %d, stderr %q; stdout is not the JSON report: %v\n%s", code, stderr, err, stdout)
	}
	if code != 0 || r.Blocking || r.SchemaVersion != diagnose.SchemaVersion {
		t.Errorf("healthy sandbox: exit %d, blocking %v, schemaVersion %d; stderr %q", code, r.Blocking, r.SchemaVersion, stderr)
	}
	if len(r.Policies) != 1 || r.Policies[0].Source != "built-in" ||
		!slices.ContainsFunc(r.Warnings, func(w string) bool {
			return strings.Contains(w, "RecoveryPolicy CRD (recoverypolicies.rebound.dev) is not installed")
		}) {
		t.Errorf("without the CRD: policies %+v, warnings %q; want the built-in default, said so", r.Policies, r.Warnings)
	}
}

// TestDiagnoseS1: S1 without rebound's controller. The zone is in
// PartialDisruption and the critical pod is stranded on node-3; diagnose,
// run as a user bound to rebound-diagnose only, names the zone state and
// its numbers, the pod, "upstream eviction: never", and rebound's decision
// (delete it), and exits 1. A non-critical Deployment on node-3 is blocked
// too, and diagnose says rebound leaves it alone.
func TestDiagnoseS1(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 5*time.Minute)
	cl := newClient(t, c)
	applyFiles(ctx, t, cl, false, repoPath("deploy/crd/rebound.dev_recoverypolicies.yaml"))
	waitCRDEstablished(ctx, t, cl, "recoverypolicies.rebound.dev")
	applyFiles(ctx, t, cl, false, repoPath(defaultPolicyFile))
	bindDiagnoseRole(ctx, t, c, cl)

	plain := scenario.Workload{Namespace: "default", Name: "not-critical", PreferNode: "node-3"}
	if err := plain.Create(ctx, c.Client); err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.RunS1(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S1Options{
		Workload: scenario.CriticalStandIn("node-3"),
		Survivor: "node-0",
		Observe:  time.Second,
	}); err != nil {
		t.Fatal(err)
	}

	opts := diagnose.Options{Config: kubeconfigREST(t, c.ReboundKubeconfig)}
	start := time.Now()
	r, code := diagnoseUntil(ctx, t, opts, 90*time.Second, "the critical pod stranded (maxUnavailableTime 30s)", func(r diagnose.Report) bool {
		cp := criticalPod(r, "kube-system", "calico-kube-controllers")
		return cp != nil && cp.Stranded
	})
	metric(t, "diagnose_s1_stranded_reported_after_notready", time.Since(start).Seconds(), "s")
	logReport(t, r)

	if code != diagnose.ExitBlocking || !r.Blocking {
		t.Errorf("exit code %d, blocking %v; want %d, true", code, r.Blocking, diagnose.ExitBlocking)
	}
	zoneName := "sandbox/zone-a"
	i := slices.IndexFunc(r.Zones, func(z diagnose.Zone) bool { return z.Zone == zoneName })
	if i < 0 {
		t.Fatalf("no zone %s in %+v", zoneName, r.Zones)
	}
	if z := r.Zones[i]; z.State != "PartialDisruption" || z.NotReady != 4 || z.Total != 5 || z.EvictionRate != 0 ||
		!strings.Contains(z.StateReason, "4 of 5 nodes NotReady") || !strings.Contains(z.RateReason, "--large-cluster-size-threshold 50") {
		t.Errorf("zone = %+v; want PartialDisruption, 4/5 NotReady, rate 0, with the reasons", z)
	}
	cp := criticalPod(r, "kube-system", "calico-kube-controllers")
	if cp.Node != "node-3" || cp.UpstreamEviction != nil || cp.Upstream != "never: zone "+zoneName+" in PartialDisruption" ||
		cp.Decision != "Act" || cp.Action != "Delete" || !strings.Contains(cp.Reason, "delete it so that ReplicaSet") {
		t.Errorf("critical pod = %+v; want on node-3, upstream never (PartialDisruption), rebound: Act Delete", cp)
	}
	w := workloadOf(r, "Deployment", "kube-system", "calico-kube-controllers")
	if w == nil || w.Impact != diagnose.ImpactBlocking ||
		!strings.Contains(w.Reason, "0/1 available: its only pod "+cp.Name+" is on NotReady node node-3 (zone "+zoneName+" PartialDisruption)") {
		t.Errorf("workload = %+v; want blocked by its only pod on NotReady node-3", w)
	}
	nc := workloadOf(r, "Deployment", "default", "not-critical")
	if nc == nil || nc.Impact != diagnose.ImpactBlocking || !strings.Contains(nc.Rebound, "no RecoveryPolicy makes it critical") {
		t.Errorf("non-critical workload = %+v; want blocked and left alone by rebound", nc)
	}
	if len(r.Findings) == 0 || r.Findings[0].Impact != diagnose.ImpactBlocking || r.Findings[0].Kind != "Workload" {
		t.Errorf("first finding = %+v, want a blocked workload", r.Findings)
	}

	// The same through the plugin binary: exit 1, JSON on stdout, the
	// summary on stderr.
	stdout, stderr, code := pluginRun(ctx, t, "--kubeconfig", c.ReboundKubeconfig, "-o", "json")
	var fromBinary diagnose.Report
	if err := json.Unmarshal([]byte(stdout), &fromBinary); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if code != 1 || !fromBinary.Blocking || !strings.HasPrefix(stderr, "error: recovery is blocked") {
		t.Errorf("kubectl-rebound diagnose: exit %d, blocking %v, stderr %q; want 1", code, fromBinary.Blocking, stderr)
	}
	t.Logf("kubectl rebound diagnose -o json (exit %d, stderr %q):\n%s", code, stderr, stdout)
	// Read-only: nothing was deleted by the diagnose identity.
	if n := len(podDeletesBy(t, c, sandbox.ReboundUser)); n != 0 {
		t.Errorf("the diagnose identity deleted %d pods", n)
	}
}

// TestDiagnoseS5: a StatefulSet pod with a ReadWriteOnce volume on node-3,
// which goes NotReady (a partition, not known to be off). diagnose says
// rebound waits for fencing and what to do, and exits 1.
func TestDiagnoseS5(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	timings.DefaultTolerationSeconds = 300
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 5*time.Minute)
	cl := newClient(t, c)
	applyFiles(ctx, t, cl, false, repoPath("deploy/crd/rebound.dev_recoverypolicies.yaml"))
	waitCRDEstablished(ctx, t, cl, "recoverypolicies.rebound.dev")
	applyFiles(ctx, t, cl, false, repoPath(defaultPolicyFile))

	if _, err := scenario.PartitionS5(ctx, c, scenario.NewTimeline(testWriter(t)), "node-3"); err != nil {
		t.Fatal(err)
	}

	r, code := diagnoseUntil(ctx, t, diagnose.Options{Config: c.Config}, 90*time.Second, "the StatefulSet pod stranded", func(r diagnose.Report) bool {
		cp := criticalPod(r, "kube-system", "etcd-standin")
		return cp != nil && cp.Stranded
	})
	logReport(t, r)
	if code != diagnose.ExitBlocking || !r.Blocking {
		t.Errorf("exit code %d, blocking %v; want %d, true", code, r.Blocking, diagnose.ExitBlocking)
	}
	cp := criticalPod(r, "kube-system", "etcd-standin")
	if cp.Name != "etcd-standin-0" || cp.Node != "node-3" || cp.Decision != "WaitingForFencing" || cp.Workload.Class != "Stateful" ||
		!strings.Contains(cp.Reason, "StatefulSet pod: waiting for fencing; add the node.kubernetes.io/out-of-service:NoExecute taint once the node is confirmed off") {
		t.Errorf("critical pod = %+v; want WaitingForFencing with what to do", cp)
	}
	w := workloadOf(r, "StatefulSet", "kube-system", "etcd-standin")
	if w == nil || w.Impact != diagnose.ImpactBlocking || !strings.Contains(w.Rebound, "waiting for fencing") {
		t.Errorf("workload = %+v; want the StatefulSet blocked, waiting for fencing", w)
	}
}

// TestDiagnoseS4: seed 003 with rebound's peering. Three BGP nodes (real
// BIRD 1.6, agents, the peering controller with a 40 s prune grace); B and
// C die, B returns within C's grace and restarts BIRD in graceful-restart
// recovery. While C is NotReady but still in the peer set, diagnose names
// it: B's BIRD waits for C, and why C is still in the set. Once the
// controller has left C out, diagnose says so and nothing BGP blocks.
func TestDiagnoseS4(t *testing.T) {
	t.Parallel()
	bins := birdtest.Require(t, bird.Bird16)
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 5*time.Minute)
	const grace = 40 * time.Second
	lab := birdLabOnSandbox(ctx, t, c, birdlab.Options{
		Bins: bins, Nodes: 3, Net: 21, Dir: shortDir(t), Include: true,
		GracefulRestartTime: 10, GracefulRestartWait: bird.DefaultGracefulRestartWait,
	}, "")
	a, b, cc := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	set := startPeeringController(t, c, controller.PeeringOptions{
		Name:         "peering-diagnose-s4",
		Config:       peering.Config{PruneGracePeriod: grace, Evidence: peering.EvidenceOptions{ReportMaxAge: 6 * time.Second}},
		NodeSelector: labels.Everything(),
		State:        controllerState("rebound-peering-diagnose-s4"),
	})
	for _, n := range lab.Nodes {
		waitInSet(ctx, t, c, n.Name, true, 30*time.Second)
	}
	if err := lab.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	agentOpts := agent.Options{PeerSet: set, Debounce: 200 * time.Millisecond, StatusInterval: time.Second, ReportInterval: 2 * time.Second, ReadyAfter: time.Hour}
	startAgent(t, c, lab, a, agentOpts)
	agentB := startAgent(t, c, lab, b, agentOpts)
	agentC := startAgent(t, c, lab, cc, agentOpts)
	s4Converge(ctx, t, lab, false)

	// B and C die; B returns at once, while C is still within its grace.
	s4KillBC(ctx, t, c, lab, agentB.Stop, agentC.Stop)
	if err := c.StartNode(ctx, b.Name); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodeReady(ctx, b.Name, true, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := lab.Start(ctx, b, true); err != nil {
		t.Fatal(err)
	}
	startAgent(t, c, lab, b, agentOpts)

	opts := diagnose.Options{Config: c.Config, Peering: peering.Config{PruneGracePeriod: grace, Evidence: peering.EvidenceOptions{ReportMaxAge: 6 * time.Second}}}
	r, code := diagnoseUntil(ctx, t, opts, grace, "B's BIRD waiting for the dead C, still in the set", func(r diagnose.Report) bool {
		return slices.ContainsFunc(r.Findings, func(f diagnose.Finding) bool {
			return f.Kind == "BGPPeerWait" && f.Object == "Node "+b.Name && strings.Contains(f.Cause, "no session with "+cc.Name)
		})
	})
	logReport(t, r)
	if code != diagnose.ExitBlocking || !r.Blocking {
		t.Errorf("exit code %d, blocking %v; want %d, true", code, r.Blocking, diagnose.ExitBlocking)
	}
	// The finding about C: under load A may also miss a heartbeat, and a
	// finding about A is not the one under test.
	f := r.Findings[slices.IndexFunc(r.Findings, func(f diagnose.Finding) bool {
		return f.Kind == "BGPPeerWait" && f.Object == "Node "+b.Name && strings.Contains(f.Cause, "no session with "+cc.Name)
	})]
	if fa := slices.IndexFunc(r.Findings, func(f diagnose.Finding) bool {
		return f.Kind == "BGPPeerWait" && f.Object == "Node "+a.Name && strings.Contains(f.Cause, "no session with "+cc.Name)
	}); fa >= 0 && r.Findings[fa].Impact != diagnose.ImpactPending {
		t.Errorf("A, up since before C died, is not held by C: want Pending, got %+v", r.Findings[fa])
	}
	if f.Impact != diagnose.ImpactBlocking || !strings.Contains(f.Cause, "still in the peer set (InGracePeriod") ||
		!strings.Contains(f.Cause, "its BIRD is likely in graceful-restart recovery and programs no routes until "+cc.Name+" leaves the set") {
		t.Errorf("finding = %+v; want B blocked on C, in the set within its grace", f)
	}
	if r.BGP.Status != "Reported" || !slices.ContainsFunc(r.BGP.KeptNotReady, func(m diagnose.BGPMember) bool {
		return m.Node == cc.Name && m.Reason == string(peering.InGracePeriod)
	}) {
		t.Errorf("bgp = %+v; want C kept in the set, InGracePeriod", r.BGP)
	}

	// The controller leaves C out after its grace; B's agent drops it.
	waitInSet(ctx, t, c, cc.Name, false, grace+30*time.Second)
	r, code = diagnoseUntil(ctx, t, opts, 30*time.Second, "C left out and nobody waiting for it", func(r diagnose.Report) bool {
		return !slices.ContainsFunc(r.Findings, func(f diagnose.Finding) bool { return f.Kind == "BGPPeerWait" })
	})
	logReport(t, r)
	if !slices.ContainsFunc(r.BGP.LeftOut, func(m diagnose.BGPMember) bool {
		return m.Node == cc.Name && m.Reason == string(peering.OutNotReady)
	}) {
		t.Errorf("left out = %+v; want C, NotReadyPastGrace", r.BGP.LeftOut)
	}
	if code != diagnose.ExitOK || r.Blocking {
		t.Errorf("after C left the set: exit code %d, blocking %v; want 0 (findings: %+v)", code, r.Blocking, r.Findings)
	}
}
