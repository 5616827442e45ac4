package install

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Objects applies rendered objects (a Helm chart's, say) server-side
// under the field owner, in the order `helm install` needs: the CRDs and
// Namespaces first, then, once every CRD is served, the rest. Each of
// the two passes is dry-run in full before anything of it is stored, so
// that an object the apiserver refuses leaves that pass unapplied.
func Objects(ctx context.Context, cl client.Client, objs []*unstructured.Unstructured, owner string) error {
	var first, rest []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition", "Namespace":
			first = append(first, o)
		default:
			rest = append(rest, o)
		}
	}
	// The real pass of the first waits for its CRDs (ApplyObjects).
	if err := applyPass(ctx, cl, first, owner); err != nil {
		return err
	}
	return applyPass(ctx, cl, rest, owner)
}

// applyPass dry-runs every object, then applies every object.
func applyPass(ctx context.Context, cl client.Client, objs []*unstructured.Unstructured, owner string) error {
	for _, dryRun := range []bool{true, false} {
		if _, err := ApplyObjects(ctx, cl, ApplyOptions{FieldManager: owner, DryRun: dryRun}, objs); err != nil {
			return fmt.Errorf("server-side apply (dry run %v): %w", dryRun, err)
		}
	}
	return nil
}
