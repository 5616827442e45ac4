package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"rebound/deploy"
	"rebound/internal/agent"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
)

// S8: one node's agent credential tries to act on other nodes.

// Agent identity, as deploy/agent defines it.
const (
	AgentNamespace      = "rebound-agent"
	AgentServiceAccount = "rebound-agent"
	// NodeNameExtra is the token's extra that names the pod's node.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
)

// S8Confinement is what an agent's token, bound to a pod on Node, could
// and could not do. Each error is the API server's answer (nil: allowed).
type S8Confinement struct {
	Node, Other string
	// TokenNode is the node name the API server put into the token's
	// identity (NodeNameExtra), "" when it did not.
	TokenNode string
	// OwnReport: write Node's PeeringReport (must succeed).
	OwnReport error
	// ReadSet: list/watch the published set by name (must succeed);
	// ReadAllConfigMaps: list every ConfigMap there (must be refused).
	ReadSet           error
	ReadAllConfigMaps error
	// OtherReport: write Other's PeeringReport. TaintOther: put
	// node.kubernetes.io/out-of-service on Other. LabelOwn: change Node's
	// in-set label. All must be refused.
	OtherReport error
	TaintOther  error
	LabelOwn    error
	// AgentPodAdmitted: the DaemonSet's pod (hostNetwork, uid 0), created
	// with a server-side dry run in its namespace rebound-agent (must be
	// admitted); AgentPodInControllerNamespace: the same in the
	// controller's restricted namespace (must be refused).
	AgentPodAdmitted              error
	AgentPodInControllerNamespace error
}

// S8AgentCredential installs deploy/'s agent confinement (the
// PeeringReport CRD, the namespaces, the agent's RBAC and the
// ValidatingAdmissionPolicy) on the sandbox, creates a pod bound to node
// (kwok runs it), requests a token for the agent ServiceAccount bound to
// that pod (TokenRequest with boundObjectRef, as the kubelet does for a
// projected token), and tries, with that token alone, what an agent may
// and may not do. admin is c's admin credential.
func S8AgentCredential(ctx context.Context, c *sandbox.Cluster, node, other string) (S8Confinement, error) {
	res := S8Confinement{Node: node, Other: other}
	if err := InstallAgentConfinement(ctx, c, "rebound-s8"); err != nil {
		return res, err
	}
	// The published set exists (the controller's), so reading it by name
	// is a real read.
	set := peering.PeerSet{Version: peering.PeerSetVersion, Generation: 1, PublishedAt: time.Now().UTC(), Peers: []peering.PublishedPeer{}}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName},
		Data:       map[string]string{peering.PeerSetKey: set.Encode()},
	}
	if _, err := c.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, err
	}

	// The DaemonSet's own pod passes its namespace's Pod Security level,
	// and would not pass the controller's.
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(deploy.AgentDaemonSet, &ds); err != nil {
		return res, fmt.Errorf("deploy/agent/daemonset.yaml: %w", err)
	}
	dsPod := func(ns string) error {
		// kube-controller-manager creates every namespace's "default"
		// ServiceAccount eventually; do not wait for it.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}
		if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "rebound-agent-"}, Spec: ds.Spec.Template.Spec}
		p.Spec.NodeName = node
		p.Spec.ServiceAccountName = "default" // exists in every namespace: only Pod Security can refuse
		_, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	res.AgentPodAdmitted = dsPod(ds.Namespace)
	res.AgentPodInControllerNamespace = dsPod(peering.DefaultPeerSetNamespace)

	token, err := AgentToken(ctx, c, node)
	if err != nil {
		return res, err
	}
	cfg := TokenConfig(c, token)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("who am I, with the agent's token: %w", err)
	}
	if v := who.Status.UserInfo.Extra[NodeNameExtra]; len(v) == 1 {
		res.TokenNode = v[0]
	}

	reports := agent.APIReportWriter{Client: dyn}
	report := func(name string) error {
		return reports.WriteReport(ctx, peering.Report{Reporter: name, ObservedAt: time.Now()})
	}
	// The policy takes effect a moment after it is created: wait until
	// the other node's report is refused (or give up and record that it
	// was not), then try everything once more.
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return apierrors.IsForbidden(report(other)), nil
	})
	res.OwnReport = report(node)
	res.OtherReport = report(other)
	_, res.ReadSet = cs.CoreV1().ConfigMaps(peering.DefaultPeerSetNamespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", peering.DefaultPeerSetName).String(),
	})
	_, res.ReadAllConfigMaps = cs.CoreV1().ConfigMaps(peering.DefaultPeerSetNamespace).List(ctx, metav1.ListOptions{})
	taint := `{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`
	_, res.TaintOther = cs.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, []byte(taint), metav1.PatchOptions{})
	label := fmt.Sprintf(`{"metadata":{"labels":{%q:"false"}}}`, peering.LabelInSet)
	_, res.LabelOwn = cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(label), metav1.PatchOptions{})
	return res, nil
}
