package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readStopSwitch reports whether the cluster-wide stop switch is pulled:
// the ConfigMap key exists. It reads uncached (reader is the API reader),
// so that pulling the switch takes effect on the very next pass. The
// recovery and the peering reconcilers both call it; an empty key means
// no switch.
func readStopSwitch(ctx context.Context, reader client.Reader, key types.NamespacedName) (bool, error) {
	if key.Name == "" {
		return false, nil
	}
	var cm corev1.ConfigMap
	err := reader.Get(ctx, key, &cm)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsForbidden(err):
		return false, fmt.Errorf("cannot read the stop switch ConfigMap %s (grant get on configmaps in %s, see deploy/rbac): %w", key, key.Namespace, err)
	default:
		return false, fmt.Errorf("read the stop switch ConfigMap %s: %w", key, err)
	}
}
