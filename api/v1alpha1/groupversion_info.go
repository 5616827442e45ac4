// Package v1alpha1 holds rebound's API: the RecoveryPolicy, and the
// PeeringReport each rebound agent writes about its node's BGP sessions.
// +kubebuilder:object:generate=true
// +groupName=rebound.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of rebound's resources.
var GroupVersion = schema.GroupVersion{Group: "rebound.dev", Version: "v1alpha1"}

// PeeringReports is the PeeringReport resource, for dynamic clients (the
// agents' writes, the CLIs' reads).
var PeeringReports = GroupVersion.WithResource("peeringreports")

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds rebound's types to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &RecoveryPolicy{}, &RecoveryPolicyList{}, &PeeringReport{}, &PeeringReportList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
