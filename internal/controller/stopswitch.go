package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/pkg/stopswitch"
)

// readStopSwitch reports whether the cluster-wide stop switch is pulled
// (pkg/stopswitch's rule, shared with `rebound restore bringup`). It reads
// uncached (reader is the API reader), so that pulling the switch takes
// effect on the very next pass. The recovery and the peering reconcilers
// both call it; an empty key means no switch.
func readStopSwitch(ctx context.Context, reader client.Reader, key types.NamespacedName) (bool, error) {
	return stopswitch.Read(ctx, key, func(ctx context.Context, key types.NamespacedName) error {
		var cm corev1.ConfigMap
		return reader.Get(ctx, key, &cm)
	})
}
