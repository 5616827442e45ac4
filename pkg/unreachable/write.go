package unreachable

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The one writer of rebound's taint, for every caller: the controller's
// unreachable reconciler (adds and removes), a node's own agent (removes
// it from its node when no controller does) and `rebound untaint` (removes
// it from every node at uninstall).

// NodeClient is the part of client-go's NodeInterface the taint writes
// use.
type NodeClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// TaintWrite is what ChangeTaint did.
type TaintWrite string

// TaintWrite values.
const (
	// TaintWritten: the taint list was written with the change.
	TaintWritten TaintWrite = "Written"
	// TaintAlreadySo: the node as re-read already was as asked.
	TaintAlreadySo TaintWrite = "AlreadySo"
	// TaintNodeGone: the node does not exist (any more).
	TaintNodeGone TaintWrite = "NodeGone"
	// TaintNodeRecreated: the node under that name is not the one the
	// caller planned for (another UID); nothing written.
	TaintNodeRecreated TaintWrite = "NodeRecreated"
)

// taintWriteAttempts bounds the re-reads of a node whose version moved
// between the read and the patch (its kubelet or kube-controller-manager
// wrote it meanwhile).
const taintWriteAttempts = 3

// ChangeTaint adds rebound's taint to node name (add set: with that
// timeAdded) or removes it (add nil). It re-reads the node from the API
// and writes its whole taint list back with the version it read:
// spec.taints has no merge key, so a patch replaces the list, and the
// resourceVersion in the patch makes the apiserver refuse it if anyone
// changed the node since (as kube-controller-manager's own taint writes
// do); a conflict is retried from a fresh read. Only rebound's taint is
// added or removed; every other one is written back as read. uid, when
// set, must be the node's: a node recreated under the same name is left
// alone. fieldManager names the writer in the node's managedFields ("":
// the client's default).
func ChangeTaint(ctx context.Context, nodes NodeClient, name string, uid types.UID, add *metav1.Time, fieldManager string) (TaintWrite, error) {
	for attempt := 1; ; attempt++ {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return TaintNodeGone, nil
		case err != nil:
			return "", fmt.Errorf("re-read node %s: %w", name, err)
		case uid != "" && n.UID != uid:
			return TaintNodeRecreated, nil
		}
		taints, changed := WithoutTaint(n.Spec.Taints)
		if add != nil {
			taints, changed = WithTaint(n.Spec.Taints, *add)
		}
		if !changed {
			return TaintAlreadySo, nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return "", err
		}
		_, err = nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		switch {
		case err == nil:
			return TaintWritten, nil
		case apierrors.IsConflict(err) && attempt < taintWriteAttempts:
			continue
		case apierrors.IsNotFound(err):
			return TaintNodeGone, nil
		default:
			return "", fmt.Errorf("patch the taints of node %s: %w", name, err)
		}
	}
}
