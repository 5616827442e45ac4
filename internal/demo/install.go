package demo

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/deploy"
	"rebound/internal/controller"
	"rebound/internal/scenario"
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
	return scenario.ApplyManifest(ctx, cl, manifest, "rebound-demo")
}
