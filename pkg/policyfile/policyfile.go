// Package policyfile reads RecoveryPolicy documents offline and gives the
// apiserver's verdict on them: it runs the code kube-apiserver runs on a
// custom resource (k8s.io/apiextensions-apiserver: pruning with unknown
// fields reported as kubectl's strict field validation does, structural
// defaulting, OpenAPI schema validation, list-type checks and the CRD's CEL
// rules) against the CRD rebound ships (deploy/crd, embedded). The default
// policy is read the same way from deploy/policy, so the YAML is its one
// source.
package policyfile

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"rebound/api/v1alpha1"
	"rebound/deploy"
)

// Result is the verdict on one document.
type Result struct {
	// Policy is the document decoded and defaulted as the apiserver would
	// store it; nil when the apiserver would reject it.
	Policy *v1alpha1.RecoveryPolicy
	// Errors are the apiserver's reasons to reject it, each naming its
	// field.
	Errors field.ErrorList
	// Warnings are problems the apiserver does not check but `rebound
	// controller` refuses at run time (label keys and values the selector
	// conversion rejects); only for a document the apiserver accepts.
	Warnings field.ErrorList
}

// Valid reports whether the apiserver would accept the document.
func (r Result) Valid() bool { return len(r.Errors) == 0 }

// Check decodes one RecoveryPolicy from YAML or JSON and judges it as
// kube-apiserver judges a create with the CRD installed and strict field
// validation (kubectl's default).
func Check(data []byte) Result {
	s, err := server()
	if err != nil {
		return Result{Errors: field.ErrorList{field.InternalError(nil, err)}}
	}
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Result{Errors: field.ErrorList{field.Invalid(field.NewPath("(document)"), field.OmitValueType{},
			"not YAML or JSON: "+err.Error())}}
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(doc, &obj); err != nil || obj == nil {
		return Result{Errors: field.ErrorList{field.Invalid(field.NewPath("(document)"), field.OmitValueType{},
			"not an object: a RecoveryPolicy is a YAML mapping with apiVersion, kind, metadata and spec")}}
	}
	errs := s.create(obj)
	if len(errs) > 0 {
		return Result{Errors: errs}
	}
	var p v1alpha1.RecoveryPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
		return Result{Errors: field.ErrorList{field.InternalError(nil, fmt.Errorf("decode the accepted policy: %w", err))}}
	}
	return Result{Policy: &p, Warnings: p.Validate()}
}

// Default is the default RecoveryPolicy, deploy/policy/default-recoverypolicy.yaml,
// as the apiserver stores it. Each call returns a fresh copy.
func Default() *v1alpha1.RecoveryPolicy {
	defaultOnce.Do(func() {
		r := Check(deploy.DefaultRecoveryPolicy)
		if !r.Valid() {
			// deploy's tests and this package's keep this from happening.
			panic(fmt.Sprintf("deploy/policy/default-recoverypolicy.yaml is invalid: %v", r.Errors.ToAggregate()))
		}
		defaultPolicy = r.Policy
	})
	return defaultPolicy.DeepCopy()
}

var (
	defaultOnce   sync.Once
	defaultPolicy *v1alpha1.RecoveryPolicy
)

// apiServer holds the CRD's compiled schema and CEL rules.
type apiServer struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *schemacel.Validator
}

var (
	serverOnce sync.Once
	theServer  *apiServer
	serverErr  error
)

func server() (*apiServer, error) {
	serverOnce.Do(func() { theServer, serverErr = newAPIServer(deploy.RecoveryPolicyCRD) })
	return theServer, serverErr
}

// newAPIServer compiles a CRD manifest as kube-apiserver does when it
// serves it.
func newAPIServer(manifest []byte) (*apiServer, error) {
	var v1 apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(manifest, &v1); err != nil {
		return nil, fmt.Errorf("decode the RecoveryPolicy CRD: %w", err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1)
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &crd, nil); err != nil {
		return nil, fmt.Errorf("convert the RecoveryPolicy CRD: %w", err)
	}
	var props *apiextensions.JSONSchemaProps
	switch {
	case len(crd.Spec.Versions) == 1 && crd.Spec.Versions[0].Schema != nil:
		props = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	case crd.Spec.Validation != nil:
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	if props == nil {
		return nil, fmt.Errorf("the RecoveryPolicy CRD has no schema")
	}
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		return nil, fmt.Errorf("structural schema: %w", err)
	}
	v, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("schema validator: %w", err)
	}
	return &apiServer{structural: s, schema: v, cel: schemacel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
}

// create prunes, defaults and validates obj in place, in
// kube-apiserver's order, and returns the errors it would return.
func (a *apiServer) create(obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	if v, _ := obj["apiVersion"].(string); v != v1alpha1.GroupVersion.String() {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), obj["apiVersion"], "apiVersion must be "+v1alpha1.GroupVersion.String()))
	}
	if k, _ := obj["kind"].(string); k != "RecoveryPolicy" {
		errs = append(errs, field.Invalid(field.NewPath("kind"), obj["kind"], "kind must be RecoveryPolicy"))
	}
	// Strict field validation: kube-apiserver prunes unknown fields and,
	// with fieldValidation=Strict (kubectl's default), refuses them. The
	// apiserver stops there; this reports the other problems too (the
	// verdict is the same), so one run shows everything to fix.
	opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
	for _, path := range pruning.PruneWithOptions(obj, a.structural, true, opts) {
		errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: path, BadValue: field.OmitValueType{},
			Detail: fmt.Sprintf("unknown field %q: remove it or correct its spelling (field names are case-sensitive)", path)})
	}
	errs = append(errs, validateMetadata(obj)...)
	structuraldefaulting.Default(obj, a.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, a.schema)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, a.structural, obj)...)
	// kube-apiserver skips CEL when schema errors make it meaningless
	// (customresource.hasBlockingErr).
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return nameFields(errs)
		}
	}
	celErrs, _ := a.cel.Validate(context.Background(), nil, a.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return nameFields(append(errs, celErrs...))
}

// trailingPath is the field an OpenAPI format error names at its end.
var trailingPath = regexp.MustCompile(` in ((?:spec|metadata)[\w.\[\]]*)$`)

// nameFields gives the errors the OpenAPI validator reports without a
// field (format checks: "... must be of type integer with format int32 in
// spec.limits.maxConcurrent") the field their message names.
func nameFields(errs field.ErrorList) field.ErrorList {
	for _, e := range errs {
		if e.Field != "" && e.Field != "<nil>" {
			continue
		}
		if m := trailingPath.FindStringSubmatch(e.Detail); m != nil {
			e.Field, e.BadValue = m[1], field.OmitValueType{}
		}
	}
	return errs
}

// validateMetadata checks metadata.name as kube-apiserver checks a
// cluster-scoped object's.
func validateMetadata(obj map[string]any) field.ErrorList {
	path := field.NewPath("metadata", "name")
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	generate, _ := meta["generateName"].(string)
	switch {
	case name == "" && generate == "":
		return field.ErrorList{field.Required(path, "name or generateName is required: set metadata.name, e.g. default")}
	case name != "":
		var errs field.ErrorList
		for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
			errs = append(errs, field.Invalid(path, name, msg))
		}
		return errs
	}
	return nil
}

// Messages renders errors one per line, for a person.
func Messages(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = strings.TrimSpace(e.Error())
	}
	return out
}
