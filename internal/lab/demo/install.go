package demo

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	"rebound/deploy"
	"rebound/internal/lab/install"
	"rebound/internal/lab/scenario"
)

// installRebound server-side applies the RecoveryPolicy CRD and the default
// policy from deploy/ (embedded), waiting for the CRD to be served in
// between.
func installRebound(ctx context.Context, cfg *rest.Config) error {
	cl, err := install.NewClient(cfg)
	if err != nil {
		return err
	}
	if err := scenario.ApplyManifest(ctx, cl, deploy.RecoveryPolicyCRD, "rebound-demo"); err != nil {
		return err
	}
	if err := install.WaitCRDEstablished(ctx, cl, install.PolicyCRD, 30*time.Second); err != nil {
		return err
	}
	return scenario.ApplyManifest(ctx, cl, deploy.DefaultRecoveryPolicy, "rebound-demo")
}
