package restore

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"rebound/pkg/policyfile"
	"rebound/pkg/rescue"
	"rebound/pkg/stopswitch"
)

// The safety rules of a bring-up that are not the planner's: targets only
// on nodes whose Lease is seen renewing, the stop switch, a suspended
// policy.

var stopKey = types.NamespacedName{Namespace: "rebound-system", Name: stopswitch.DefaultName}

func stopSwitchConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: stopKey.Namespace, Name: stopKey.Name}}
}

// TestBringupTargetsOnlyNodesSeenAlive: after a restore every Node says
// what it said at backup time. A node Ready in the API whose Lease never
// renews is no target, however Ready it looks; the same cluster with that
// Lease renewing gets its delete.
func TestBringupTargetsOnlyNodesSeenAlive(t *testing.T) {
	cordoned := node("node-0", true)
	cordoned.Spec.Unschedulable = true
	for _, tc := range []struct {
		name string
		// node-0 is always there (Ready unless replaced); extra adds
		// nodes; alive are the nodes whose Lease renews.
		node0   *corev1.Node
		extra   []runtime.Object
		alive   []string
		deletes int
		reason  string
	}{
		{"the only Ready node's Lease never renews", nil, nil, nil, 0,
			"no Ready node has been seen alive yet: the Lease of node-0 has not been seen renewing"},
		{"the only live node is cordoned, the free one is Ready from the backup", cordoned,
			[]runtime.Object{node("node-1", true), lease("node-1")}, []string{"node-0"}, 0,
			"could run only on nodes Ready in the API whose Lease has not been seen renewing (node-1)"},
		{"control: the free Ready node renews its Lease", cordoned,
			[]runtime.Object{node("node-1", true), lease("node-1")}, []string{"node-0", "node-1"}, 1, ""},
		{"control: node-0 renews its Lease", nil, nil, []string{"node-0"}, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append([]runtime.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
				node("node-0", true), node("node-3", false), lease("node-0"), lease("node-3"),
			}, tc.extra...)
			client := fake.NewSimpleClientset(append(objs, strandedDeployment()...)...)
			if tc.node0 != nil {
				if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), tc.node0, ""); err != nil {
					t.Fatal(err)
				}
			}
			renewing(client, tc.alive...)
			var out strings.Builder
			res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, Progress: &out, LeaseObservation: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if w := writes(client); len(w) != tc.deletes {
				t.Fatalf("writes = %v, want %d deletes\n%s", w, tc.deletes, out.String())
			}
			if res.LiveNodes != len(tc.alive) {
				t.Errorf("liveNodes = %d, want %d", res.LiveNodes, len(tc.alive))
			}
			if tc.deletes > 0 {
				return
			}
			if len(res.Stranded) != 1 || res.Stranded[0].Decision != rescue.DecisionNoTarget || !strings.Contains(res.Stranded[0].Reason, tc.reason) {
				t.Errorf("stranded = %+v, want NoTarget with %q", res.Stranded, tc.reason)
			}
			if len(res.Actions) != 0 {
				t.Errorf("actions = %+v, want none", res.Actions)
			}
			for _, want := range []string{"waiting to see its Lease renew", "has not renewed in 5s: probably dead"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("progress lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestBringupDryRunWatchesLeasesFirst: a dry run reads the cluster until
// the Ready nodes' Leases have renewed (or the bound passes), so that the
// delete it lists is one a real run would make.
func TestBringupDryRunWatchesLeasesFirst(t *testing.T) {
	for _, alive := range []bool{true, false} {
		client := cluster(node("node-3", false), strandedDeployment()...)
		if !alive {
			client = fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
				node("node-0", true), node("node-3", false), lease("node-0"), lease("node-3"))
			for _, o := range strandedDeployment() {
				if err := client.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
		}
		res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, DryRun: true, LeaseObservation: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeDryRun || len(writes(client)) != 0 {
			t.Fatalf("alive %v: outcome %s, writes %v", alive, res.Outcome, writes(client))
		}
		if planned := len(res.Actions); (planned == 1) != alive {
			t.Errorf("node-0 alive %v: %d actions planned %+v", alive, planned, res.Actions)
		}
		if !alive && res.ElapsedSeconds < 10 {
			t.Errorf("dry run ended after %.0fs, before the 10s Lease observation", res.ElapsedSeconds)
		}
	}
}

func TestObservationBound(t *testing.T) {
	s := func(durations ...time.Duration) *clusterState {
		st := &clusterState{leaseDuration: map[string]time.Duration{}}
		for i, d := range durations {
			n := node(string(rune('a'+i)), true)
			st.nodes = append(st.nodes, n)
			st.leaseDuration[n.Name] = d
		}
		return st
	}
	for _, tc := range []struct {
		state *clusterState
		want  time.Duration
	}{
		{s(40 * time.Second), 20 * time.Second}, // kubelet's default Lease: two renewals
		{s(8*time.Second, 40*time.Second), 20 * time.Second},
		{s(time.Second), minObservation},
		{s(10 * time.Minute), maxObservation},
		{s(), defaultObservation},
	} {
		if got := observationBound(tc.state); got != tc.want {
			t.Errorf("observationBound = %s, want %s", got, tc.want)
		}
	}
}

// TestBringupHonoursStopSwitch: with the controller's stop switch pulled a
// bring-up plans and reports, acts on nothing and exits 4; a dry run says
// so; a switch that cannot be read stops the bring-up before any action.
func TestBringupHonoursStopSwitch(t *testing.T) {
	t.Run("pulled", func(t *testing.T) {
		client := cluster(node("node-3", false), append(strandedDeployment(), stopSwitchConfigMap())...)
		var out strings.Builder
		res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, StopSwitch: stopKey, Progress: &out})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeStopped || res.ExitCode != ExitUnsafe || ExitCodeOf(res.Err()) != ExitUnsafe || !res.StopSwitchPulled {
			t.Fatalf("outcome %s exit %d, want Stopped 4: %s", res.Outcome, res.ExitCode, res.Message)
		}
		if w := writes(client); len(w) != 0 {
			t.Errorf("writes = %v, want none", w)
		}
		if len(res.Actions) != 1 || !res.Actions[0].DryRun || !strings.Contains(res.Actions[0].Outcome, "stop switch") || len(res.Stranded) != 1 {
			t.Errorf("the plan should be reported, not applied: actions %+v, stranded %+v", res.Actions, res.Stranded)
		}
		for _, want := range []string{"stop switch ConfigMap rebound-system/rebound-stop: pulled", "would Delete, not applied", "kubectl -n rebound-system delete configmap rebound-stop"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("progress lacks %q:\n%s", want, out.String())
			}
		}
	})
	t.Run("pulled, dry run", func(t *testing.T) {
		client := cluster(node("node-3", false), append(strandedDeployment(), stopSwitchConfigMap())...)
		var out strings.Builder
		res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, StopSwitch: stopKey, DryRun: true, Progress: &out})
		if err != nil || res.Outcome != OutcomeDryRun || len(writes(client)) != 0 {
			t.Fatalf("dry run: %v, %+v, writes %v", err, res, writes(client))
		}
		if !strings.Contains(out.String(), "a run without --dry-run would act on nothing and exit 4") {
			t.Errorf("progress:\n%s", out.String())
		}
	})
	t.Run("not pulled", func(t *testing.T) {
		client := cluster(node("node-3", false), strandedDeployment()...)
		if _, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, StopSwitch: stopKey}); err != nil {
			t.Fatal(err)
		}
		if w := writes(client); len(w) != 1 {
			t.Errorf("writes = %v, want the delete", w)
		}
		var read bool
		for _, a := range client.Actions() {
			if g, ok := a.(k8stesting.GetAction); ok && g.GetResource().Resource == "configmaps" && g.GetName() == stopKey.Name && g.GetNamespace() == stopKey.Namespace {
				read = true
			}
		}
		if !read {
			t.Error("the stop switch was never read")
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		client := cluster(node("node-3", false), strandedDeployment()...)
		client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("connection refused")
		})
		res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, StopSwitch: stopKey})
		if err == nil || !strings.Contains(err.Error(), "stop switch") || res != nil {
			t.Errorf("result %v, err %v: want the read error", res, err)
		}
		if w := writes(client); len(w) != 0 {
			t.Errorf("writes = %v, want none", w)
		}
	})
}

// TestBringupRefusesSuspendedPolicy: a policy with spec.suspend is refused
// (exit 4, nothing read or changed) unless --ignore-suspend; a dry run
// plans it and warns.
func TestBringupRefusesSuspendedPolicy(t *testing.T) {
	suspended := policyfile.Default()
	suspended.Spec.Suspend = true
	newClient := func() *fake.Clientset {
		objs := strandedDeployment()
		objs[0].(*appsv1.Deployment).Spec.Template.Spec.PriorityClassName = "system-cluster-critical"
		return cluster(node("node-3", false), objs...)
	}

	client := newClient()
	res, err := run(t, client, Options{Selection: Selection{Policy: suspended}})
	if res != nil || ExitCodeOf(err) != ExitUnsafe {
		t.Fatalf("suspended policy: result %v, err %v (exit %d), want exit 4", res, err, ExitCodeOf(err))
	}
	for _, want := range []string{"is suspended (spec.suspend: true)", "--ignore-suspend", "nothing changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if w := writes(client); len(w) != 0 {
		t.Errorf("writes = %v", w)
	}

	client = newClient()
	res, err = run(t, client, Options{Selection: Selection{Policy: suspended}, IgnoreSuspend: true})
	if err != nil {
		t.Fatal(err)
	}
	if w := writes(client); len(w) != 1 || !strings.Contains(strings.Join(res.Warnings, "\n"), "acting anyway (--ignore-suspend)") {
		t.Errorf("--ignore-suspend: writes %v, warnings %v", w, res.Warnings)
	}

	client = newClient()
	res, err = run(t, client, Options{Selection: Selection{Policy: suspended}, DryRun: true})
	if err != nil || res.Outcome != OutcomeDryRun || len(writes(client)) != 0 || len(res.Actions) != 1 {
		t.Fatalf("dry run of a suspended policy: %v, %+v", err, res)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "refuses it unless --ignore-suspend") {
		t.Errorf("warnings %v", res.Warnings)
	}
}
