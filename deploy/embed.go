// Package deploy embeds the manifests of this folder, so that rebound can
// install its CRD and default policy (the demo does) without a checkout.
package deploy

import _ "embed"

// RecoveryPolicyCRD is the RecoveryPolicy CustomResourceDefinition.
//
//go:embed crd/rebound.dev_recoverypolicies.yaml
var RecoveryPolicyCRD []byte

// PeeringReportCRD is the PeeringReport CustomResourceDefinition: the
// agents' BGP session reports.
//
//go:embed crd/rebound.dev_peeringreports.yaml
var PeeringReportCRD []byte

// DefaultRecoveryPolicy is the default RecoveryPolicy (kube-system critical
// pods, 30 s).
//
//go:embed policy/default-recoverypolicy.yaml
var DefaultRecoveryPolicy []byte
