package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/api/v1alpha1"
)

// PreflightOptions say what the controller about to start needs.
type PreflightOptions struct {
	// Recovery: the RecoveryPolicy CRD must be served.
	Recovery bool
	// Namespace must exist when set: it holds the leader-election Lease,
	// the stop switch and the peering state.
	Namespace string
}

// Preflight checks, before the manager starts, what would otherwise show
// only as a library error repeated for ever (controller-runtime retries a
// missing CRD every 10 s; the peering state's ConfigMap create fails on
// every pass) while /readyz says ready. Each error says what to apply. A
// check it is not allowed to make (Forbidden) is skipped: RBAC is not its
// business.
func Preflight(ctx context.Context, cfg *rest.Config, opts PreflightOptions) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var errs []error
	if opts.Recovery {
		gv := v1alpha1.GroupVersion.String()
		_, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("the RecoveryPolicy CRD (recoverypolicies.rebound.dev, %s) is not installed: apply it with `kubectl apply --server-side -f deploy/crd/` (or all of deploy/ with `kubectl apply --server-side -k deploy/`), or run with --no-recovery", gv))
		case err != nil && !apierrors.IsForbidden(err):
			return fmt.Errorf("cannot reach the apiserver to check for the RecoveryPolicy CRD: %w", err)
		}
	}
	if opts.Namespace != "" {
		_, err := cs.CoreV1().Namespaces().Get(ctx, opts.Namespace, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("namespace %s does not exist (it holds the leader-election Lease, the stop switch and the peering state): create it with `kubectl apply -f deploy/controller/namespace.yaml`, or pick another with --namespace", opts.Namespace))
		case err != nil && !apierrors.IsForbidden(err):
			return fmt.Errorf("cannot check namespace %s: %w", opts.Namespace, err)
		}
	}
	return errors.Join(errs...)
}
