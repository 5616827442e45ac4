package restore

import (
	"strings"
	"testing"

	"rebound/pkg/policyfile"
)

func TestParseWorkloadRef(t *testing.T) {
	good := map[string]WorkloadRef{
		"kube-system/deployment/coredns":     {"kube-system", KindDeployment, "coredns"},
		"kube-system/Deployment/coredns":     {"kube-system", KindDeployment, "coredns"},
		"kube-system/deploy/coredns":         {"kube-system", KindDeployment, "coredns"},
		" kube-system/ds/calico-node ":       {"kube-system", KindDaemonSet, "calico-node"},
		"kube-system/DaemonSets/calico-node": {"kube-system", KindDaemonSet, "calico-node"},
		"db/sts/pg.primary":                  {"db", KindStatefulSet, "pg.primary"},
	}
	for in, want := range good {
		got, err := ParseWorkloadRef(in)
		if err != nil || got != want {
			t.Errorf("ParseWorkloadRef(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseWorkloadRef(got.String()); err != nil || back != got {
			t.Errorf("String() does not round-trip: %q -> %v, %v", got.String(), back, err)
		}
	}
	bad := map[string]string{
		"coredns":                          "want namespace/kind/name",
		"kube-system/coredns":              "want namespace/kind/name",
		"a/b/c/d":                          "want namespace/kind/name",
		"kube-system/cronjob/x":            `kind "cronjob" is not one of`,
		"Kube_System/deployment/x":         "namespace",
		"kube-system/deployment/":          "name",
		"kube-system/deployment/Bad_Name!": "name",
		"/deployment/coredns":              "namespace",
		"kube-system/deployment/" + long(): "name",
	}
	for in, want := range bad {
		if _, err := ParseWorkloadRef(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWorkloadRef(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func long() string { return strings.Repeat("a", 254) }

func TestParseWorkloadList(t *testing.T) {
	data := []byte(`# essential services of the platform
kube-system/deployment/coredns
kube-system/deployment/calico-kube-controllers   # networking

kube-system/ds/calico-node
`)
	refs, err := ParseWorkloadList(data, "essential.txt")
	if err != nil || len(refs) != 3 || refs[2] != (WorkloadRef{"kube-system", KindDaemonSet, "calico-node"}) {
		t.Fatalf("ParseWorkloadList = %v, %v", refs, err)
	}
	if _, err := ParseWorkloadList([]byte("kube-system/deployment/coredns\nkube-system/job/x\n"), "essential.txt"); err == nil || !strings.HasPrefix(err.Error(), "essential.txt:2: ") {
		t.Errorf("error = %v, want one starting with the file and line", err)
	}
	if _, err := ParseWorkloadList([]byte("# nothing\n\n"), "empty.txt"); err == nil || !strings.Contains(err.Error(), "lists no workload") {
		t.Errorf("empty list: err = %v", err)
	}
}

func TestDedupe(t *testing.T) {
	a := WorkloadRef{"kube-system", KindDeployment, "coredns"}
	b := WorkloadRef{"kube-system", KindDaemonSet, "calico-node"}
	got := Dedupe([]WorkloadRef{a, b, a})
	if len(got) != 2 || got[0] != b || got[1] != a {
		t.Errorf("Dedupe = %v", got)
	}
}

func TestPlanningPolicy(t *testing.T) {
	refs := []WorkloadRef{{"kube-system", KindDeployment, "coredns"}, {"monitoring", KindDeployment, "x"}, {"kube-system", KindDaemonSet, "y"}}
	p, err := planningPolicy(nil, refs, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.MaxUnavailableTime.Duration != 0 || p.Spec.DryRun || p.Spec.Suspend || strings.Join(p.Spec.Critical.Namespaces, ",") != "kube-system,monitoring" {
		t.Errorf("policy = %+v", p.Spec)
	}
	// A policy file lends its actions, fencing and limits; a restore acts
	// at once and ignores suspend, but keeps its dryRun.
	base := policyfile.Default()
	base.Spec.Suspend, base.Spec.DryRun = true, true
	base.Spec.Limits.MaxConcurrent = 2
	p, err = planningPolicy(base, refs, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "default" || p.Spec.Suspend || !p.Spec.DryRun || p.Spec.Limits.MaxConcurrent != 2 || p.Spec.MaxUnavailableTime.Duration != 0 {
		t.Errorf("policy from a file = %+v", p.Spec)
	}
	if len(p.Spec.Critical.PriorityClassNames) != 0 {
		t.Error("the file's selector was kept: the planner must see only the essential workloads' pods")
	}
}
