package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"rebound/deploy"
	"rebound/internal/agent"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// S12: rebound's controller is stopped (or on a dead node). Calico's
// BGPPeer fails open (a node without the label is in the mesh), and the
// rejoin agent (deploy/agent/rejoin) puts a node that returns Ready back
// into it; this file has what the tests need for that agent's identity.

// RejoinServiceAccount is the rejoin agent's identity, as deploy/agent/rejoin
// defines it (in AgentNamespace).
const RejoinServiceAccount = "rebound-rejoin"

// InstallRejoin applies the rejoin agent's namespace, ServiceAccount, RBAC
// and ValidatingAdmissionPolicy from deploy/ (not its DaemonSet: the tests
// run the agent as a process).
func InstallRejoin(ctx context.Context, cfg *rest.Config) error {
	cl, err := install.NewClient(cfg)
	if err != nil {
		return err
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-s12"}, deploy.AgentNamespace, deploy.RejoinRBAC, deploy.RejoinAdmission)
	return err
}

// RejoinToken creates a pod of the rejoin agent's ServiceAccount bound to
// node (as its DaemonSet's pod would be; it tolerates every taint, so it
// stays bound while the node is dead) and returns a token bound to that
// pod, as the kubelet projects it: the API server puts the node's name
// into the token's identity (NodeNameExtra).
func RejoinToken(ctx context.Context, c *sandbox.Cluster, node string) (string, error) {
	return NodeBoundToken(ctx, c, RejoinServiceAccount, "rebound-rejoin-"+node, node)
}

// TokenConfig is c's API server with token as the only credential.
func TokenConfig(c *sandbox.Cluster, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = token
	return cfg
}

// WriteTokenKubeconfig writes a kubeconfig for c's API server with token
// as the only credential, for a process (`rebound agent --kubeconfig`).
func WriteTokenKubeconfig(c *sandbox.Cluster, token, path string) error {
	return writeTokenKubeconfig(c, c.Config.Host, token, path)
}

// writeTokenKubeconfig is WriteTokenKubeconfig for the apiserver at
// server (c's own, or an APIPath to it).
func writeTokenKubeconfig(c *sandbox.Cluster, server, token, path string) error {
	ca := c.Config.CAData
	if len(ca) == 0 && c.Config.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(c.Config.CAFile); err != nil {
			return err
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sandbox"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["token"] = &clientcmdapi.Context{Cluster: "sandbox", AuthInfo: "token"}
	cfg.CurrentContext = "token"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// AddNode creates one more fake node, node-<i>, shaped as the sandbox's own
// (kwok manages it, so it turns Ready), with an address of its own, and
// waits until it is Ready. It is a node that joins the cluster.
func AddNode(ctx context.Context, c *sandbox.Cluster, i int, timeout time.Duration) (*corev1.Node, error) {
	name := sandbox.NodeName(i)
	var zone, region string
	if existing, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeNames[0], metav1.GetOptions{}); err == nil {
		zone, region = existing.Labels[corev1.LabelTopologyZone], existing.Labels[corev1.LabelTopologyRegion]
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				corev1.LabelTopologyRegion: region, corev1.LabelTopologyZone: zone,
				"type": "kwok", sandbox.HeartbeatLabel: "on",
			},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: sandbox.NodeAddress(i)},
			{Type: corev1.NodeHostName, Address: name},
		}},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create node %s: %w", name, err)
	}
	if err := c.WaitNodeReady(ctx, name, true, timeout); err != nil {
		return nil, err
	}
	return c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// RejoinedAt is when the rejoin agent last wrote the node's labels, from
// the API's own record (the managedFields entry of agent.RejoinFieldManager,
// whole seconds), and when the node last turned Ready (its Ready
// condition's lastTransitionTime, whole seconds). Zero when either is
// missing.
func RejoinedAt(n *corev1.Node) (ready, rejoined time.Time) {
	if ok, since := kubestatus.NodeReadySince(n); ok {
		ready = since
	}
	for _, mf := range n.ManagedFields {
		if mf.Manager == agent.RejoinFieldManager && mf.Time != nil && mf.Time.After(rejoined) {
			rejoined = mf.Time.Time
		}
	}
	return ready, rejoined
}

// S8RejoinConfinement is what a rejoin agent's token, bound to a pod on
// Node, could and could not do to the Nodes. Each error is the API
// server's answer (nil: allowed). All but the two Own*Back are dry runs,
// so each is judged on the same stored state.
type S8RejoinConfinement struct {
	Node, Other string
	// TokenNode is the node name the API server put into the token.
	TokenNode string
	// OwnBack: the agent's own patch, Node in-set false -> true, Ready
	// (must succeed). OwnRemoved: the label removed instead (must
	// succeed).
	OwnBack, OwnRemoved error
	// All must be refused (Forbidden):
	OtherBack         error // Other's label false -> true
	OwnToFalse        error // Node's label true -> false
	OwnBackWithLabel  error // false -> true plus another label
	OwnBackWithTaint  error // false -> true plus a taint
	OwnAnnotation     error // an annotation only
	OwnCordon         error // spec.unschedulable
	OwnStatus         error // the status subresource
	DeleteOther       error // delete Other
	OwnBackNotReady   error // false -> true while Node is NotReady
	UnboundTokenPatch error // false -> true with a token bound to no pod (no node name)
}

// S8RejoinCredential installs deploy/'s rejoin agent confinement on the
// sandbox and tries, with a token of its ServiceAccount bound to a pod on
// node, everything a rejoin agent may and may not do to the Nodes. It
// labels node and other in-set=false (as the controller would) first, and
// stops node (its heartbeats) for the NotReady case last.
func S8RejoinCredential(ctx context.Context, c *sandbox.Cluster, node, other string) (S8RejoinConfinement, error) {
	res := S8RejoinConfinement{Node: node, Other: other}
	if err := InstallRejoin(ctx, c.Config); err != nil {
		return res, err
	}
	token, err := RejoinToken(ctx, c, node)
	if err != nil {
		return res, err
	}
	cs, err := kubernetes.NewForConfig(TokenConfig(c, token))
	if err != nil {
		return res, err
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("who am I, with the rejoin agent's token: %w", err)
	}
	if v := who.Status.UserInfo.Extra[NodeNameExtra]; len(v) == 1 {
		res.TokenNode = v[0]
	}
	unbound, err := c.Client.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, RejoinServiceAccount, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return res, err
	}
	ucs, err := kubernetes.NewForConfig(TokenConfig(c, unbound.Status.Token))
	if err != nil {
		return res, err
	}

	label := func(name, value string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, peering.LabelInSet, value)
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	for _, n := range []string{node, other} {
		if err := label(n, "false"); err != nil {
			return res, err
		}
	}
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	merge := func(cs kubernetes.Interface, name, patch string, opts metav1.PatchOptions) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), opts)
		return err
	}
	back := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, peering.LabelInSet)
	// The policy takes effect a moment after it is created: wait until
	// the other node's patch is refused (a dry run: nothing changes if it
	// is not), then try everything.
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return apierrors.IsForbidden(merge(cs, other, back, dry)), nil
	})
	res.OtherBack = merge(cs, other, back, dry)
	res.OwnBackWithLabel = merge(cs, node, fmt.Sprintf(`{"metadata":{"labels":{%q:"true","team":"x"}}}`, peering.LabelInSet), dry)
	res.OwnBackWithTaint = merge(cs, node, fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}},"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`, peering.LabelInSet), dry)
	res.OwnAnnotation = merge(cs, node, `{"metadata":{"annotations":{"rebound.dev/x":"y"}}}`, dry)
	res.OwnCordon = merge(cs, node, fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}},"spec":{"unschedulable":true}}`, peering.LabelInSet), dry)
	_, res.OwnStatus = cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`), dry, "status")
	res.DeleteOther = cs.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	res.UnboundTokenPatch = merge(ucs, node, back, dry)

	// The agent's own patch, for real; then the label removed instead.
	res.OwnBack = rejoinOnce(ctx, cs, node)
	if err := label(node, "false"); err != nil {
		return res, err
	}
	rm := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, peering.LabelInSet)
	res.OwnRemoved = merge(cs, node, rm, metav1.PatchOptions{})
	if err := label(node, "true"); err != nil {
		return res, err
	}
	res.OwnToFalse = merge(cs, node, fmt.Sprintf(`{"metadata":{"labels":{%q:"false"}}}`, peering.LabelInSet), dry)

	// NotReady: the node's heartbeats stop.
	if err := label(node, "false"); err != nil {
		return res, err
	}
	if err := c.StopNode(ctx, node); err != nil {
		return res, err
	}
	if err := c.WaitNodeReady(ctx, node, false, 2*time.Minute); err != nil {
		return res, err
	}
	res.OwnBackNotReady = merge(cs, node, back, dry)
	return res, c.StartNode(ctx, node)
}

// rejoinOnce makes the rejoin agent's own patch through its code path.
func rejoinOnce(ctx context.Context, cs kubernetes.Interface, node string) error {
	r := agent.NewRejoiner(agent.Options{NodeName: node, Client: cs})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.Rejoins() > 0, nil
	})
	cancel()
	if runErr := <-done; runErr != nil {
		return runErr
	}
	if err != nil {
		return fmt.Errorf("the rejoiner did not put %s back (%s): %w", node, r.LastError(), err)
	}
	return nil
}
