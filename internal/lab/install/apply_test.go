package install

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rebound/deploy"
)

func TestDecode(t *testing.T) {
	objs, err := Decode([]byte(`---
apiVersion: v1
kind: Namespace
metadata:
  name: a
---
# an empty document
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [x.yaml]
---
{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "a"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetKind() != "Namespace" || objectName(objs[1]) != "a/b" {
		t.Fatalf("Decode = %v, want the Namespace and the ConfigMap, no Kustomization", objs)
	}
	if _, err := Decode([]byte("kind: [")); err == nil {
		t.Error("Decode of broken YAML: no error")
	}
}

func TestDecodeDeployCRDs(t *testing.T) {
	for _, m := range [][]byte{deploy.RecoveryPolicyCRD, deploy.PeeringReportCRD} {
		objs, err := Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || !isCRD(objs[0]) {
			t.Errorf("deploy CRD manifest decodes to %v, want one CRD", objs)
		}
	}
	objs, err := Decode(deploy.Namespace)
	if err != nil || len(objs) == 0 || isCRD(objs[0]) {
		t.Errorf("the namespace manifest: %v, %v", objs, err)
	}
}

func TestCRDServed(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Group: "rebound.dev", Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "RecoveryPolicy"},
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true}, {Name: "v0", Served: false}},
	}}
	all := func(schema.GroupKind, string) bool { return true }
	if crdServed(crd, all) {
		t.Error("served before Established")
	}
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	var asked []string
	if !crdServed(crd, func(gk schema.GroupKind, v string) bool { asked = append(asked, gk.Kind+"/"+v); return true }) {
		t.Error("Established and mapped, but not served")
	}
	if len(asked) != 1 || asked[0] != "RecoveryPolicy/v1alpha1" {
		t.Errorf("asked the mapper for %v, want only the served version", asked)
	}
	if crdServed(crd, func(schema.GroupKind, string) bool { return false }) {
		t.Error("served although discovery does not map it yet")
	}
}
