package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/deploy"
	"rebound/internal/controller"
)

// installRebound server-side applies the RecoveryPolicy CRD and the default
// policy from deploy/ (embedded), waiting for the CRD to be served in
// between.
func installRebound(ctx context.Context, cfg *rest.Config) error {
	scheme := controller.Scheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := apply(ctx, cl, deploy.RecoveryPolicyCRD); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKey{Name: "recoverypolicies.rebound.dev"}, &crd); err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("RecoveryPolicy CRD not established: %w", err)
	}
	return apply(ctx, cl, deploy.DefaultRecoveryPolicy)
}

func apply(ctx context.Context, cl client.Client, manifest []byte) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := cl.Patch(ctx, &obj, client.Apply, client.FieldOwner("rebound-demo"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
}
