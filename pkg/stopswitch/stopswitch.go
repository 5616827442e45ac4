// Package stopswitch is rebound's cluster-wide stop switch: while a
// ConfigMap of a known name exists (by default rebound-stop in the
// controller's namespace), nothing of rebound acts. The controller's
// reconcilers and `rebound restore bringup` read it with their own clients
// and judge the read by the one rule here.
package stopswitch

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultName is the stop switch ConfigMap's default name.
const DefaultName = "rebound-stop"

// Getter reads the ConfigMap key names and returns the read's error only:
// the switch is the object's existence, never its content.
type Getter func(ctx context.Context, key types.NamespacedName) error

// Read reports whether the switch is pulled. An empty key.Name means no
// switch. The read must go to the API (not a cache), so that pulling the
// switch takes effect on the very next pass; a read that fails is an
// error, and the caller acts on nothing until it can read again.
func Read(ctx context.Context, key types.NamespacedName, get Getter) (bool, error) {
	if key.Name == "" {
		return false, nil
	}
	return Interpret(key, get(ctx, key))
}

// Interpret is the rule for the outcome of reading the switch: found means
// pulled, NotFound means not pulled, anything else is an error (a
// Forbidden one says which grant is missing).
func Interpret(key types.NamespacedName, err error) (bool, error) {
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
