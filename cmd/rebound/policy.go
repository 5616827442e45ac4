package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"rebound/pkg/exitcode"
	"rebound/pkg/policyfile"
)

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with RecoveryPolicy files",
	}
	var out outputFlag
	validate := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check RecoveryPolicy files offline and get the apiserver's verdict",
		Long: `Judges each file with the apiserver's own code (k8s.io/apiextensions-apiserver)
against the RecoveryPolicy CRD rebound ships (deploy/crd): unknown fields are
refused as kubectl's strict field validation refuses them, the schema's
defaults are applied, then its OpenAPI checks and CEL rules run. A file is
valid exactly when kube-apiserver would accept it. Each problem names its field.

Problems the apiserver does not check but rebound controller would refuse at
run time (label keys and values a selector cannot convert) are printed as
warnings and also fail the file.

Exit code 0 when every file is valid, 1 otherwise.

  rebound policy validate deploy/policy/default-recoverypolicy.yaml
  rebound policy validate -o json my-policy.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			type result struct {
				File string `json:"file"`
				Name string `json:"name,omitempty"`
				// Valid is the verdict; APIServerValid is the
				// apiserver's alone (true with warnings).
				Valid          bool     `json:"valid"`
				APIServerValid bool     `json:"apiserverValid"`
				Errors         []string `json:"errors,omitempty"`
				Warnings       []string `json:"warnings,omitempty"`
			}
			var results []result
			bad := 0
			for _, f := range files {
				r := result{File: f}
				data, err := os.ReadFile(f)
				if err != nil {
					r.Errors = []string{err.Error()}
				} else {
					c := policyfile.Check(data)
					if c.Policy != nil {
						r.Name = c.Policy.Name
					}
					r.APIServerValid = c.Valid()
					r.Errors = policyfile.Messages(c.Errors)
					r.Warnings = policyfile.Messages(c.Warnings)
				}
				r.Valid = len(r.Errors) == 0 && len(r.Warnings) == 0
				if !r.Valid {
					bad++
				}
				results = append(results, r)
			}
			err := out.print(cmd.OutOrStdout(), results, func() string {
				var b strings.Builder
				for _, r := range results {
					switch {
					case r.Valid:
						fmt.Fprintf(&b, "%s: RecoveryPolicy %q is valid\n", r.File, r.Name)
					case len(r.Errors) > 0:
						fmt.Fprintf(&b, "%s: invalid: the apiserver would reject it\n", r.File)
					default:
						fmt.Fprintf(&b, "%s: invalid: the apiserver would accept it, but rebound controller would refuse it\n", r.File)
					}
					for _, e := range r.Errors {
						fmt.Fprintf(&b, "  - %s\n", e)
					}
					for _, e := range r.Warnings {
						fmt.Fprintf(&b, "  - %s\n", e)
					}
				}
				return b.String()
			})
			if err != nil {
				return err
			}
			if bad > 0 {
				return &exitcode.Error{Code: 1, Err: fmt.Errorf("%d of %d files invalid", bad, len(files))}
			}
			return nil
		},
	}
	out.register(validate)
	cmd.AddCommand(validate)
	return cmd
}
