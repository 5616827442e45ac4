package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/agent"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/unreachable"
)

// S8, the gossip member's credential: it may take rebound's taint off its
// own node (internal/agent/untaint.go) and change nothing else of any
// Node (deploy/gossip: RBAC and the ValidatingAdmissionPolicy
// rebound-gossip-untaint-own-node).

// GossipUntaintPolicy is the policy's name, as its refusals quote it.
const GossipUntaintPolicy = "rebound-gossip-untaint-own-node"

// S8GossipConfinement is what a gossip member's token, bound to a pod on
// Node, could and could not do to Nodes. Each error is the API server's
// answer (nil: allowed).
type S8GossipConfinement struct {
	Node, Other string
	// TokenNode is the node name the API server put into the token's
	// identity (NodeNameExtra), "" when it did not.
	TokenNode string
	// OwnRemoval: take rebound's taint off Node, through the agent's own
	// writer (must succeed; every other taint stays).
	OwnRemoval error
	// The rest must be refused: rebound's taint off Other, or off Node
	// with a token bound to no pod; a taint added to Node (another, or
	// rebound's own), another taint removed, a label changed, alone or
	// with the removal, a cordon with the removal; Node's status patched;
	// Other deleted.
	OtherRemoval        error
	UnboundTokenRemoval error
	OwnAddTaint         error
	OwnAddOurs          error
	OwnRemoveOther      error
	OwnLabel            error
	OwnRemovalWithLabel error
	OwnRemovalCordon    error
	OwnStatus           error
	DeleteOther         error
	// Untouched lists the taints left on Node after the allowed removal.
	Untouched []corev1.Taint
}

// S8GossipCredential installs deploy/gossip's confinement on the sandbox,
// marks node and other with rebound's taint as the controller would
// (beside another taint on node), and tries, with a token of the gossip
// ServiceAccount bound to a pod on node alone, what a member may and may
// not do to Nodes. Refusals are tried as server-side dry runs, so that
// nothing changes when one is wrongly allowed; the allowed removal is
// made for real, last.
func S8GossipCredential(ctx context.Context, c *sandbox.Cluster, node, other string) (S8GossipConfinement, error) {
	res := S8GossipConfinement{Node: node, Other: other}
	if err := InstallGossipConfinement(ctx, c, "rebound-s8"); err != nil {
		return res, err
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	mark := func(name string, extra ...corev1.Taint) error {
		return patchTaints(ctx, c.Client, name, func(taints []corev1.Taint) []corev1.Taint {
			taints, _ = unreachable.WithTaint(append(taints, extra...), metav1.NewTime(time.Now().Truncate(time.Second)))
			return taints
		})
	}
	if err := mark(node, dedicated); err != nil {
		return res, err
	}
	if err := mark(other); err != nil {
		return res, err
	}
	token, err := GossipToken(ctx, c, node)
	if err != nil {
		return res, err
	}
	cs, err := kubernetes.NewForConfig(TokenConfig(c, token))
	if err != nil {
		return res, err
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("who am I, with the gossip member's token: %w", err)
	}
	if v := who.Status.UserInfo.Extra[NodeNameExtra]; len(v) == 1 {
		res.TokenNode = v[0]
	}
	unbound, err := c.Client.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, GossipServiceAccount, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return res, err
	}
	ucs, err := kubernetes.NewForConfig(TokenConfig(c, unbound.Status.Token))
	if err != nil {
		return res, err
	}

	dry := metav1.DryRunAll
	// taints writes name's taint list as change makes it from the stored
	// one, with its resourceVersion, as the agent's writer does, plus an
	// optional extra merge of metadata and spec.
	taints := func(cs kubernetes.Interface, name string, change func([]corev1.Taint) []corev1.Taint, extra map[string]any) error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec := map[string]any{"taints": change(n.Spec.Taints)}
		meta := map[string]any{"resourceVersion": n.ResourceVersion}
		for k, v := range extra {
			switch k {
			case "labels":
				meta[k] = v
			default:
				spec[k] = v
			}
		}
		return mergePatch(ctx, cs, name, map[string]any{"metadata": meta, "spec": spec}, dry)
	}
	without := func(t []corev1.Taint) []corev1.Taint { out, _ := unreachable.WithoutTaint(t); return out }
	same := func(t []corev1.Taint) []corev1.Taint { return t }
	// The policy takes effect a moment after it is created: wait until
	// the other node's removal is refused (a dry run: nothing changes if
	// it is not), then try everything.
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return apierrors.IsForbidden(taints(cs, other, without, nil)), nil
	})
	res.OtherRemoval = taints(cs, other, without, nil)
	res.UnboundTokenRemoval = taints(ucs, node, without, nil)
	res.OwnAddTaint = taints(cs, node, func(t []corev1.Taint) []corev1.Taint {
		return append(t, corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	}, nil)
	res.OwnRemoveOther = taints(cs, node, func(t []corev1.Taint) []corev1.Taint {
		var out []corev1.Taint
		for _, x := range t {
			if x.Key != dedicated.Key {
				out = append(out, x)
			}
		}
		return out
	}, nil)
	res.OwnLabel = taints(cs, node, same, map[string]any{"labels": map[string]any{"team": "x"}})
	res.OwnRemovalWithLabel = taints(cs, node, without, map[string]any{"labels": map[string]any{"team": "x"}})
	res.OwnRemovalCordon = taints(cs, node, without, map[string]any{"unschedulable": true})
	_, res.OwnStatus = cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`),
		metav1.PatchOptions{DryRun: []string{dry}}, "status")
	res.DeleteOther = cs.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{DryRun: []string{dry}})

	// The agent's own write, for real.
	w, err := unreachable.ChangeTaint(ctx, cs.CoreV1().Nodes(), node, "", nil, agent.UntaintFieldManager)
	switch {
	case err != nil:
		res.OwnRemoval = err
	case w != unreachable.TaintWritten:
		res.OwnRemoval = fmt.Errorf("the agent's writer found nothing to remove (%s)", w)
	}
	// Once it is off, putting it back is adding a taint.
	res.OwnAddOurs = taints(cs, node, func(t []corev1.Taint) []corev1.Taint {
		out, _ := unreachable.WithTaint(t, metav1.NewTime(time.Now().Truncate(time.Second)))
		return out
	}, nil)
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	res.Untouched = n.Spec.Taints
	// Leave other as it was found: unmarked.
	return res, patchTaints(ctx, c.Client, other, func(t []corev1.Taint) []corev1.Taint { return without(t) })
}

// patchTaints writes name's taints as change makes them, as admin.
func patchTaints(ctx context.Context, cs kubernetes.Interface, name string, change func([]corev1.Taint) []corev1.Taint) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return mergePatch(ctx, cs, name, map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion}, "spec": map[string]any{"taints": change(n.Spec.Taints)}}, "")
}

func mergePatch(ctx context.Context, cs kubernetes.Interface, name string, patch map[string]any, dryRun string) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{}
	if dryRun != "" {
		opts.DryRun = []string{dryRun}
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, opts)
	return err
}
