package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyOptions say how Apply applies.
type ApplyOptions struct {
	// FieldManager owns the applied fields. Ownership is forced: the
	// lab's manifests are the truth for the objects they name.
	FieldManager string
	// DryRun has the apiserver validate and default every object and
	// store none; a CRD is then not waited for, since it is not served.
	DryRun bool
	// CRDTimeout bounds the wait for each applied CRD to be served; 30 s
	// when zero.
	CRDTimeout time.Duration
}

// Apply server-side applies every object of the multi-document YAML (or
// JSON) manifests, in order, skipping Kustomization documents, and
// returns them as the apiserver answered. Each CRD is waited for until
// it is served before the next object is applied, so a manifest may
// carry a CRD and the objects of its kind.
func Apply(ctx context.Context, cl client.Client, opts ApplyOptions, manifests ...[]byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for i, m := range manifests {
		o, err := Decode(m)
		if err != nil {
			return nil, fmt.Errorf("manifest %d: %w", i+1, err)
		}
		objs = append(objs, o...)
	}
	return ApplyObjects(ctx, cl, opts, objs)
}

// ApplyObjects is Apply for objects already decoded (a rendered chart).
// The objects passed in are not changed.
func ApplyObjects(ctx context.Context, cl client.Client, opts ApplyOptions, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	if opts.FieldManager == "" {
		return nil, errors.New("apply: no field manager")
	}
	if opts.CRDTimeout == 0 {
		opts.CRDTimeout = 30 * time.Second
	}
	patch := []client.PatchOption{client.FieldOwner(opts.FieldManager), client.ForceOwnership}
	if opts.DryRun {
		patch = append(patch, client.DryRunAll)
	}
	var applied []*unstructured.Unstructured
	for _, o := range objs {
		obj := o.DeepCopy()
		if err := cl.Patch(ctx, obj, client.Apply, patch...); err != nil {
			return applied, fmt.Errorf("apply %s %s: %w", obj.GetKind(), objectName(obj), err)
		}
		applied = append(applied, obj)
		if isCRD(obj) && !opts.DryRun {
			if err := WaitCRDEstablished(ctx, cl, obj.GetName(), opts.CRDTimeout); err != nil {
				return applied, err
			}
		}
	}
	return applied, nil
}

// Decode splits a multi-document YAML (or JSON) manifest into its
// objects, leaving out empty and Kustomization documents.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj.Object) == 0 || obj.GetKind() == "Kustomization" {
			continue
		}
		out = append(out, obj)
	}
}

func isCRD(obj *unstructured.Unstructured) bool {
	gvk := obj.GroupVersionKind()
	return gvk.Group == apiextensionsv1.GroupName && gvk.Kind == "CustomResourceDefinition"
}

func objectName(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// WaitCRDEstablished waits until the named CRD is served: Established,
// and its kind known to cl's REST mapper. The apiserver publishes a new
// group in discovery a moment after Established, and an apply in that
// moment fails with "no matches for kind" (seen in CI). The CRD is read
// unstructured, so cl's scheme need not know CRDs.
func WaitCRDEstablished(ctx context.Context, cl client.Client, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
			return false, err
		}
		return crdServed(&crd, func(gk schema.GroupKind, version string) bool {
			_, err := cl.RESTMapper().RESTMapping(gk, version)
			return err == nil
		}), nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", name, err)
	}
	return nil
}

// crdServed says whether crd is Established and every served version of
// its kind is mapped.
func crdServed(crd *apiextensionsv1.CustomResourceDefinition, mapped func(schema.GroupKind, string) bool) bool {
	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = true
		}
	}
	if !established {
		return false
	}
	gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	for _, v := range crd.Spec.Versions {
		if v.Served && !mapped(gk, v.Name) {
			return false
		}
	}
	return true
}
