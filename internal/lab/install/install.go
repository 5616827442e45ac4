// Package install puts rebound's manifests from deploy/ on a cluster
// (through scenario.ApplyManifest): waiting for the CRD to be served, and
// the controller's roles bound to a given identity; and a rendered Helm
// chart's objects (Objects). The demo, the scale bench and the e2e tests
// install rebound through it.
package install

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/deploy"
	"rebound/internal/controller"
	"rebound/internal/lab/scenario"
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

// WaitCRDEstablished waits until the named CRD is served: Established,
// and its kind known to cl's REST mapper. The apiserver publishes a new
// group in discovery a moment after Established, and an apply in that
// moment fails with "no matches for kind" (seen in CI).
func WaitCRDEstablished(ctx context.Context, cl client.Client, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			if _, err := cl.RESTMapper().RESTMapping(gk, v.Name); err != nil {
				return false, nil //nolint:nilerr // not in discovery yet: poll
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", name, err)
	}
	return nil
}

// ControllerFor applies the RecoveryPolicy CRD, the rebound-system
// namespace and the controller's roles, binds the roles to user (the
// identity a test or bench runs `rebound controller` with, so that it has
// exactly the rights it has in a cluster), and waits for the CRD.
func ControllerFor(ctx context.Context, cl client.Client, owner, user string) error {
	for _, m := range [][]byte{deploy.RecoveryPolicyCRD, deploy.Namespace, deploy.ControllerRBAC} {
		if err := scenario.ApplyManifest(ctx, cl, m, owner); err != nil {
			return err
		}
	}
	if err := bindToUser(ctx, cl, owner+"-user", user, "rebound-controller", "rebound-system", "rebound-leader-election"); err != nil {
		return err
	}
	return WaitCRDEstablished(ctx, cl, PolicyCRD, 30*time.Second)
}

// PeeringReportCRD is the PeeringReport CRD's name.
const PeeringReportCRD = "peeringreports.rebound.dev"

// DetectionFor applies what `rebound controller --lease-plane` reads: the
// PeeringReport CRD (the agents' gossip votes) and the roles of
// deploy/rbac/controller_detection.yaml, bound to user, and waits for the
// CRD. Run it after ControllerFor.
func DetectionFor(ctx context.Context, cl client.Client, owner, user string) error {
	for _, m := range [][]byte{deploy.PeeringReportCRD, deploy.DetectionRBAC} {
		if err := scenario.ApplyManifest(ctx, cl, m, owner); err != nil {
			return err
		}
	}
	if err := bindToUser(ctx, cl, owner+"-detection-user", user, "rebound-controller-detection", "kube-node-lease", "rebound-node-leases"); err != nil {
		return err
	}
	return WaitCRDEstablished(ctx, cl, PeeringReportCRD, 30*time.Second)
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
