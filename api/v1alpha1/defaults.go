package v1alpha1

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"rebound/deploy"
)

// The defaults of the optional fields have one source: the
// +kubebuilder:default markers in recoverypolicy_types.go, which
// controller-gen (hack/gen.sh) writes into the CRD. The API server applies
// them from the CRD; Default applies the same values, read at start from
// the same generated CRD (embedded by package deploy), to objects that did
// not come through an API server.

// specDefaults are the CRD's defaults of RecoveryPolicySpec's fields.
type specDefaults struct {
	maxUnavailableTime                 time.Duration
	actions                            []RescueAction
	fencingMode                        FencingMode
	detection                          Detection
	maxActionsPerMinute, maxConcurrent int32
}

var crdDefaults = mustReadCRDDefaults(deploy.RecoveryPolicyCRD)

// schemaNode is the part of an OpenAPI schema the defaults sit in.
type schemaNode struct {
	Default    json.RawMessage       `json:"default"`
	Properties map[string]schemaNode `json:"properties"`
}

// mustReadCRDDefaults reads the defaults from the CRD manifest; the CRD is
// generated and embedded, so a failure is a build mistake (TestCRDDefaults
// catches it).
func mustReadCRDDefaults(manifest []byte) specDefaults {
	d, err := readCRDDefaults(manifest)
	if err != nil {
		panic("api/v1alpha1: the embedded RecoveryPolicy CRD (run hack/gen.sh): " + err.Error())
	}
	return d
}

func readCRDDefaults(manifest []byte) (specDefaults, error) {
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema schemaNode `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	var d specDefaults
	if err := yaml.Unmarshal(manifest, &crd); err != nil {
		return d, err
	}
	if len(crd.Spec.Versions) != 1 {
		return d, fmt.Errorf("%d versions, want 1", len(crd.Spec.Versions))
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	var duration string
	for _, f := range []struct {
		node schemaNode
		into any
	}{
		{spec.Properties["maxUnavailableTime"], &duration},
		{spec.Properties["actions"], &d.actions},
		{spec.Properties["fencing"].Properties["mode"], &d.fencingMode},
		{spec.Properties["detection"], &d.detection},
		{spec.Properties["limits"].Properties["maxActionsPerMinute"], &d.maxActionsPerMinute},
		{spec.Properties["limits"].Properties["maxConcurrent"], &d.maxConcurrent},
	} {
		if len(f.node.Default) == 0 {
			return d, fmt.Errorf("a default is missing from spec's schema")
		}
		if err := json.Unmarshal(f.node.Default, f.into); err != nil {
			return d, err
		}
	}
	var err error
	d.maxUnavailableTime, err = time.ParseDuration(duration)
	return d, err
}

// Default fills in the fields the API server defaults, with the CRD's
// default values (see crdDefaults). As on the API server, only
// unset fields are filled: a nil list (not an empty one), and, since Go
// cannot tell an absent number from 0, a zero limit.
func (s *RecoveryPolicySpec) Default() {
	if s.MaxUnavailableTime == nil {
		s.MaxUnavailableTime = &metav1.Duration{Duration: crdDefaults.maxUnavailableTime}
	}
	if s.Actions == nil {
		s.Actions = slices.Clone(crdDefaults.actions)
	}
	if s.Fencing.Mode == "" {
		s.Fencing.Mode = crdDefaults.fencingMode
	}
	if s.Detection == "" {
		s.Detection = crdDefaults.detection
	}
	if s.Limits.MaxActionsPerMinute == 0 {
		s.Limits.MaxActionsPerMinute = crdDefaults.maxActionsPerMinute
	}
	if s.Limits.MaxConcurrent == 0 {
		s.Limits.MaxConcurrent = crdDefaults.maxConcurrent
	}
}

// EffectiveMaxUnavailableTime is how long a critical pod may sit on a
// NotReady node: the CRD's default when unset, otherwise the value, kept
// within 0s..1h so that a caller that skipped Validate still gets a sane
// bound.
func (s *RecoveryPolicySpec) EffectiveMaxUnavailableTime() time.Duration {
	if s.MaxUnavailableTime == nil {
		return crdDefaults.maxUnavailableTime
	}
	return min(max(s.MaxUnavailableTime.Duration, 0), maxMaxUnavailableTime)
}
