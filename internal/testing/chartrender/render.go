// Package chartrender renders rebound's Helm chart (charts/rebound) and
// kustomize bases (deploy/) into objects, with the Helm and kustomize Go
// libraries, for tests that compare, lint and apply them. It is imported
// only by tests: the rebound binaries must not link Helm or kustomize.
package chartrender

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Options say how to render the chart, as `helm template` flags would.
type Options struct {
	// Release and Namespace default to rebound and rebound-system.
	Release, Namespace string
	// Values are merged over the chart's values.yaml.
	Values map[string]any
	// SkipCRDs leaves out the chart's crds/ folder (helm template
	// includes it only with --include-crds; helm install applies it).
	SkipCRDs bool
}

func (o Options) withDefaults() Options {
	if o.Release == "" {
		o.Release = "rebound"
	}
	if o.Namespace == "" {
		o.Namespace = "rebound-system"
	}
	return o
}

// Render renders the chart at path: a chart folder, or a packaged chart
// (.tgz) as a release ships it and `helm install CHART.tgz` takes it.
func Render(path string, o Options) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", path, err)
	}
	return RenderChart(ch, o)
}

// RenderChart renders a loaded chart. The objects come in a stable order:
// CRDs first, then by template file and document.
func RenderChart(ch *chart.Chart, o Options) ([]*unstructured.Unstructured, error) {
	o = o.withDefaults()
	vals, err := chartutil.ToRenderValues(ch, o.Values, chartutil.ReleaseOptions{
		Name: o.Release, Namespace: o.Namespace, IsInstall: true, Revision: 1,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	var out []*unstructured.Unstructured
	if !o.SkipCRDs {
		for _, crd := range ch.CRDObjects() {
			objs, err := Decode(crd.File.Data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", crd.Filename, err)
			}
			out = append(out, objs...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if path.Ext(name) != ".yaml" || strings.HasPrefix(path.Base(name), "_") {
			continue // NOTES.txt, helpers
		}
		objs, err := Decode([]byte(files[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, obj := range objs {
			if obj.GetNamespace() == "" && namespaced(obj.GetKind()) {
				obj.SetNamespace(o.Namespace) // as helm install does
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// namespaced lists the namespaced kinds the chart renders, so that Render
// can fill in the release namespace where a template leaves it out.
func namespaced(kind string) bool {
	switch kind {
	case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "RecoveryPolicy",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "BGPPeer":
		return false
	}
	return true
}

// Lint runs Helm's own linter (helm lint) with values; it returns every
// message of severity warning or worse.
func Lint(dir string, values map[string]any) []string {
	l := lint.All(dir, values, "rebound-system", false)
	var out []string
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m.Error())
		}
	}
	return out
}

// Kustomize builds the kustomization in dir, as `kubectl apply -k` would.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	data, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	return Decode(data)
}

// Decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// Key names an object: kind, namespace and name.
func Key(obj *unstructured.Unstructured) string {
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// helmLabels are the labels the chart adds for Helm's bookkeeping; the
// kustomize bases do not carry them.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/part-of"}

// Normalize returns the objects by Key, with Helm's bookkeeping labels
// removed everywhere (metadata, pod templates), so that a rendered chart
// and a kustomize build can be compared object by object.
func Normalize(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		o = o.DeepCopy()
		for _, p := range [][]string{{"metadata", "labels"}, {"spec", "template", "metadata", "labels"}} {
			labels, ok, _ := unstructured.NestedStringMap(o.Object, p...)
			if !ok {
				continue
			}
			for _, l := range helmLabels {
				delete(labels, l)
			}
			if len(labels) == 0 {
				unstructured.RemoveNestedField(o.Object, p...)
			} else {
				_ = unstructured.SetNestedStringMap(o.Object, labels, p...)
			}
		}
		// Checksums of rendered config make pods roll on upgrade.
		unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations", "checksum/config")
		out[Key(o)] = o
	}
	return out
}
