package v1alpha1

// This file runs the API server's own CRD machinery (from
// k8s.io/apiextensions-apiserver, no cluster) on the generated CRD:
// the CRD must pass the checks kube-apiserver runs when it is created
// (structural schema, CEL compilation, CEL cost limits), and objects are
// pruned, defaulted and validated the way kube-apiserver does on create.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

const crdFile = "rebound.dev_recoverypolicies.yaml"

// openAPISchema is the CRD's one schema. The internal type keeps it in
// spec.validation when every version has the same schema.
func openAPISchema(t testing.TB, crd *apiextensions.CustomResourceDefinition) *apiextensions.JSONSchemaProps {
	t.Helper()
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD has %d versions, want 1", len(crd.Spec.Versions))
	}
	if v := crd.Spec.Versions[0].Schema; v != nil && v.OpenAPIV3Schema != nil {
		return v.OpenAPIV3Schema
	}
	if crd.Spec.Validation == nil || crd.Spec.Validation.OpenAPIV3Schema == nil {
		t.Fatal("CRD has no schema")
	}
	return crd.Spec.Validation.OpenAPIV3Schema
}

// apiServer validates RecoveryPolicy objects like kube-apiserver's
// customresource strategy does on create.
type apiServer struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *schemacel.Validator
}

func loadCRD(t testing.TB) (*apiextensionsv1.CustomResourceDefinition, *apiextensions.CustomResourceDefinition) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "crd", crdFile))
	if err != nil {
		t.Fatalf("read CRD (run hack/gen.sh): %v", err)
	}
	var v1 apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &v1); err != nil {
		t.Fatalf("decode CRD: %v", err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &internal, nil); err != nil {
		t.Fatalf("convert CRD: %v", err)
	}
	// As after the first create: the storage version is stored.
	internal.Status.StoredVersions = []string{GroupVersion.Version}
	return &v1, &internal
}

func newAPIServer(t testing.TB) *apiServer {
	t.Helper()
	_, crd := loadCRD(t)
	props := openAPISchema(t, crd)
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatalf("structural schema: %v", err)
	}
	v, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatalf("schema validator: %v", err)
	}
	return &apiServer{structural: s, schema: v, cel: schemacel.NewValidator(s, true, celconfig.PerCallLimit)}
}

// create prunes, defaults and validates obj in place and returns the
// errors kube-apiserver would return.
func (a *apiServer) create(obj map[string]any) field.ErrorList {
	pruning.Prune(obj, a.structural, true)
	structuraldefaulting.Default(obj, a.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, a.schema)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, a.structural, obj)...)
	// kube-apiserver skips CEL when schema errors make it meaningless
	// (customresource.hasBlockingErr).
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return errs
		}
	}
	celErrs, _ := a.cel.Validate(context.Background(), nil, a.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// TestCRDAcceptedByAPIServer runs the checks kube-apiserver runs on a CRD,
// including the static CEL cost limits, and logs each rule's cost.
func TestCRDAcceptedByAPIServer(t *testing.T) {
	v1, crd := loadCRD(t)
	if v1.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Errorf("scope = %s, want Cluster", v1.Spec.Scope)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		for _, e := range errs {
			t.Errorf("kube-apiserver would reject the CRD: %v", e)
		}
	}

	// The cost of every rule, for the record and to keep a margin. The
	// selector rules dominate: they walk metav1.LabelSelector's
	// matchExpressions, which has no maxItems (the type is upstream's, so no
	// marker can bound it) and is estimated from the 3 MiB request limit.
	// Each must stay under a third of the per-rule limit and all together
	// under a quarter of the CRD's limit, so that later rules have room.
	s, err := structuralschema.NewStructural(openAPISchema(t, crd))
	if err != nil {
		t.Fatal(err)
	}
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	var total uint64
	var walk func(path string, s *structuralschema.Structural, root bool)
	walk = func(path string, s *structuralschema.Structural, root bool) {
		if len(s.XValidations) > 0 {
			results, err := schemacel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit, envSet, schemacel.NewExpressionsEnvLoader())
			if err != nil {
				t.Fatalf("%s: compile: %v", path, err)
			}
			for i, r := range results {
				if r.Error != nil {
					t.Errorf("%s rule %d: %v", path, i, r.Error)
					continue
				}
				// None of the rules sits below a list or map, so each runs
				// once per object.
				total += r.MaxCost
				t.Logf("CEL cost %-40s rule %d: %d", path, i, r.MaxCost)
				if r.MaxCost > crdvalidation.StaticEstimatedCostLimit/3 {
					t.Errorf("%s rule %d: estimated cost %d is over a third of the limit %d: bound the lists and strings it reads (maxItems, maxLength)",
						path, i, r.MaxCost, crdvalidation.StaticEstimatedCostLimit)
				}
			}
		}
		for name, p := range s.Properties {
			walk(path+"."+name, &p, false)
		}
		if s.Items != nil {
			if len(s.Items.XValidations) > 0 {
				t.Errorf("%s[]: rules under a list multiply their cost; move them up", path)
			}
			walk(path+"[]", s.Items, false)
		}
	}
	walk("", s, true)
	t.Logf("CEL cost total: %d (limit %d)", total, crdvalidation.StaticEstimatedCRDCostLimit)
	if total > crdvalidation.StaticEstimatedCRDCostLimit/4 {
		t.Errorf("total CEL cost %d is over a quarter of the limit %d", total, crdvalidation.StaticEstimatedCRDCostLimit)
	}
}

// TestGoMessagesInCRD: the messages Validate uses for the checks the API
// server does with CEL are the ones in the CRD, word for word.
func TestGoMessagesInCRD(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "crd", crdFile))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var messages []string
	var walk func(s *apiextensionsv1.JSONSchemaProps)
	walk = func(s *apiextensionsv1.JSONSchemaProps) {
		for _, r := range s.XValidations {
			messages = append(messages, r.Message)
		}
		for _, p := range s.Properties {
			walk(&p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(s.Items.Schema)
		}
	}
	walk(crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	want := celMessages()
	if len(messages) != len(want) {
		t.Errorf("CRD has %d CEL messages, Go has %d: keep validation.go and the markers in step", len(messages), len(want))
	}
	have := strings.Join(messages, "\n")
	for _, m := range want {
		if !strings.Contains(have, m) {
			t.Errorf("Go message not in the CRD's rules (update the marker or validation.go): %q", m)
		}
	}
}

// repoRoot is the module root, two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	return root
}
