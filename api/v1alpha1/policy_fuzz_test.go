package v1alpha1

import (
	"encoding/json"
	"testing"
)

// FuzzPolicyValidate feeds arbitrary documents to ParseRecoveryPolicy, what
// `rebound policy validate FILE` runs on a user's file. Whatever the input,
// it must return (never panic or hang), every error must name a field and
// say something, and a policy it accepts must stay accepted: validating it
// again, or parsing its JSON form, finds nothing. The seeds under
// testdata/fuzz/FuzzPolicyValidate are the shipped default policy and the
// good and bad documents of validation_test.go; `go test` replays them.
func FuzzPolicyValidate(f *testing.F) {
	f.Add([]byte(policyYAML(kubeSystem)))
	for _, tc := range validationCases {
		f.Add([]byte(policyYAML(tc.spec)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, errs := ParseRecoveryPolicy(data)
		for _, e := range errs {
			if e == nil || e.Field == "" || e.Error() == "" {
				t.Fatalf("error without a field or a message: %#v", e)
			}
		}
		if len(errs) > 0 {
			return
		}
		if p == nil {
			t.Fatal("no errors but no policy")
		}
		if again := p.Validate(); len(again) > 0 {
			t.Fatalf("accepted policy fails Validate: %v", again)
		}
		doc, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("accepted policy does not marshal: %v", err)
		}
		if _, errs := ParseRecoveryPolicy(doc); len(errs) > 0 {
			t.Fatalf("accepted policy, written as JSON, is refused: %v\n%s", errs, doc)
		}
	})
}
