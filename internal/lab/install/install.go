// Package install is the lab's one way to put manifests on a cluster:
// server-side apply under a field manager, each CRD waited for until it
// is served, a dry run as an option (Apply, ApplyObjects); a rendered
// Helm chart's objects in install order (Objects); and rebound's
// manifests from deploy/ with the controller's roles bound to a given
// identity (ControllerFor, DetectionFor). The scenarios, the demo, the
// benches and the e2e tests apply through it.
package install

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/deploy"
	"rebound/internal/controller"
)

// PolicyCRD is the RecoveryPolicy CRD's name.
const PolicyCRD = "recoverypolicies.rebound.dev"

// NewClient is a client that knows rebound's types and CRDs.
func NewClient(cfg *rest.Config) (client.Client, error) {
	scheme := controller.Scheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// ControllerFor applies the RecoveryPolicy CRD, the rebound-system
// namespace and the controller's roles, binds the roles to user (the
// identity a test or bench runs `rebound controller` with, so that it has
// exactly the rights it has in a cluster). Apply waits for the CRD.
func ControllerFor(ctx context.Context, cl client.Client, owner, user string) error {
	if _, err := Apply(ctx, cl, ApplyOptions{FieldManager: owner}, deploy.RecoveryPolicyCRD, deploy.Namespace, deploy.ControllerRBAC); err != nil {
		return err
	}
	return bindToUser(ctx, cl, owner+"-user", user, "rebound-controller", "rebound-system", "rebound-leader-election")
}

// PeeringReportCRD is the PeeringReport CRD's name.
const PeeringReportCRD = "peeringreports.rebound.dev"

// DetectionFor applies what `rebound controller --lease-plane` reads: the
// PeeringReport CRD (the agents' gossip votes) and the roles of
// deploy/rbac/controller_detection.yaml, bound to user (Apply waits for
// the CRD). Run it after ControllerFor.
func DetectionFor(ctx context.Context, cl client.Client, owner, user string) error {
	if _, err := Apply(ctx, cl, ApplyOptions{FieldManager: owner}, deploy.PeeringReportCRD, deploy.DetectionRBAC); err != nil {
		return err
	}
	if err := bindToUser(ctx, cl, owner+"-detection-user", user, "rebound-controller-detection", "kube-node-lease", "rebound-node-leases"); err != nil {
		return err
	}
	// The fencing document's Role, in the controller's namespace.
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: owner + "-fencing-user", Namespace: "rebound-system"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "rebound-fencing-document"}}
	if err := cl.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind rebound-system/rebound-fencing-document to %s: %w", user, err)
	}
	return nil
}

// bindToUser binds clusterRole, and role in namespace, to user under the
// binding name name: a test's or bench's identity gets exactly the rights
// the ServiceAccount has in a cluster.
func bindToUser(ctx context.Context, cl client.Client, name, user, clusterRole, namespace, role string) error {
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for _, obj := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}},
	} {
		if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bind %s and %s/%s to %s: %w", clusterRole, namespace, role, user, err)
		}
	}
	return nil
}
