package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/release"
	"rebound/internal/testing/chartrender"
)

// TestHelmChartPackageInstall installs the chart as a release ships it:
// packaged and linted by internal/release (version and appVersion
// stamped from this checkout), loaded from the .tgz, not the folder,
// rendered with Helm's engine and applied server-side to the sandbox's
// apiserver. Every rendered object is then read back from the API with
// the labels it was applied with, and the controller's Deployment carries
// the stamp and runs the release's image tag.
func TestHelmChartPackageInstall(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoPath("."))
	if err != nil {
		t.Fatal(err)
	}
	state, err := release.ReadState(root)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := release.Chart(release.Options{Root: root, Dist: t.TempDir(), State: state})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chartrender.Render(pkg.Package, chartrender.Options{Values: map[string]any{"namespace": map[string]any{"create": true}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 15 {
		t.Fatalf("the packaged chart renders %d objects, want the CRDs, RBAC, Deployment, PDB, Service, NetworkPolicy, policy...", len(objs))
	}

	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	cl := newClient(t, c)
	if err := install.Objects(ctx, cl, objs, "helm-package-e2e"); err != nil {
		t.Fatal(err)
	}

	// A label value may not hold "+": a dev build's version has one.
	wantChartLabel := "rebound-" + strings.ReplaceAll(pkg.Version, "+", "_")
	wantVersionLabel := strings.ReplaceAll(state.Version, "+", "_")
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := cl.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s: %v", chartrender.Key(o), err)
			continue
		}
		for k, v := range o.GetLabels() {
			if got.GetLabels()[k] != v {
				t.Errorf("%s: label %s=%q, applied %q", chartrender.Key(o), k, got.GetLabels()[k], v)
			}
		}
	}

	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "rebound-system", Name: "rebound-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	if l := dep.GetLabels(); l["helm.sh/chart"] != wantChartLabel || l["app.kubernetes.io/version"] != wantVersionLabel {
		t.Errorf("controller Deployment: labels helm.sh/chart=%q app.kubernetes.io/version=%q, want %q and %q",
			l["helm.sh/chart"], l["app.kubernetes.io/version"], wantChartLabel, wantVersionLabel)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	var image string
	if len(containers) > 0 {
		image, _, _ = unstructured.NestedString(containers[0].(map[string]any), "image")
	}
	if want := "rebound:" + state.Version; image != want {
		t.Errorf("controller image %q, want %q: the tag defaults to the appVersion, the release's version", image, want)
	}
}
