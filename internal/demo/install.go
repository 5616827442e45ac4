package demo

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	"rebound/deploy"
	"rebound/internal/install"
)

// installRebound server-side applies the RecoveryPolicy CRD and the default
// policy from deploy/ (embedded), waiting for the CRD to be served in
// between.
func installRebound(ctx context.Context, cfg *rest.Config) error {
	cl, err := install.NewClient(cfg)
	if err != nil {
		return err
	}
	if err := install.Apply(ctx, cl, "rebound-demo", deploy.RecoveryPolicyCRD); err != nil {
		return err
	}
	if err := install.WaitCRDEstablished(ctx, cl, install.PolicyCRD, 30*time.Second); err != nil {
		return err
	}
	return install.Apply(ctx, cl, "rebound-demo", deploy.DefaultRecoveryPolicy)
}
