package demo

import (
	"context"

	"k8s.io/client-go/rest"

	"rebound/deploy"
	"rebound/internal/lab/install"
)

// installPolicy applies the RecoveryPolicy CRD and the default policy
// from deploy/ (embedded): what the in-process controller reads.
func installPolicy(ctx context.Context, cfg *rest.Config) error {
	cl, err := install.NewClient(cfg)
	if err != nil {
		return err
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-demo"}, deploy.RecoveryPolicyCRD, deploy.DefaultRecoveryPolicy)
	return err
}
