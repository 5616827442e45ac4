package scenario

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/deploy"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
)

// NodeBoundToken creates a pod named pod of ServiceAccount sa (in
// AgentNamespace) bound to node, as a DaemonSet's pod would be (it
// tolerates every taint, so it stays bound while the node is dead), and
// returns a token bound to that pod, as the kubelet projects it: the API
// server puts the node's name into the token's identity (NodeNameExtra),
// which the admission policies read.
func NodeBoundToken(ctx context.Context, c *sandbox.Cluster, sa, pod, node string) (string, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: AgentNamespace, Name: pod},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: sa,
			HostNetwork:        true,
			Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:         []corev1.Container{{Name: "agent", Image: "rebound:dev"}},
		},
	}
	// The ServiceAccount admission plugin wants the ServiceAccount, which
	// the caller just applied: retry while the caches catch up.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Pods(AgentNamespace).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = c.Client.CoreV1().Pods(AgentNamespace).Get(ctx, p.Name, metav1.GetOptions{})
		}
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		p = got
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("create pod %s of %s on %s: %w", pod, sa, node, err)
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token bound to pod %s: %w", p.Name, err)
	}
	return tr.Status.Token, nil
}

// InstallAgentConfinement applies deploy/'s agent confinement: the
// PeeringReport CRD, the namespaces, the agent's RBAC and its
// ValidatingAdmissionPolicy (not its DaemonSet: tests run agents as
// processes).
func InstallAgentConfinement(ctx context.Context, c *sandbox.Cluster, owner string) error {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return err
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: owner},
		deploy.PeeringReportCRD, deploy.ControllerNamespace, deploy.AgentNamespace, deploy.AgentRBAC, deploy.AgentAdmission)
	return err
}

// AgentToken is a token of the agent's ServiceAccount bound to node, as
// its DaemonSet's pod has (InstallAgentConfinement first).
func AgentToken(ctx context.Context, c *sandbox.Cluster, node string) (string, error) {
	return NodeBoundToken(ctx, c, AgentServiceAccount, "rebound-agent-"+node, node)
}

// GossipServiceAccount is the gossip members' identity, as deploy/gossip
// defines it (in AgentNamespace).
const GossipServiceAccount = "rebound-gossip"

// InstallGossipConfinement applies deploy/gossip's confinement: the
// PeeringReport CRD, the agents' namespace, the members' ServiceAccount
// and RBAC and their ValidatingAdmissionPolicies (not their DaemonSet:
// tests run the members as processes).
func InstallGossipConfinement(ctx context.Context, c *sandbox.Cluster, owner string) error {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return err
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: owner},
		deploy.PeeringReportCRD, deploy.AgentNamespace, deploy.GossipRBAC, deploy.GossipAdmission)
	return err
}

// GossipToken is a token of the gossip members' ServiceAccount bound to
// node, as its DaemonSet's pod has (InstallGossipConfinement first).
func GossipToken(ctx context.Context, c *sandbox.Cluster, node string) (string, error) {
	return NodeBoundToken(ctx, c, GossipServiceAccount, "rebound-gossip-"+node, node)
}
