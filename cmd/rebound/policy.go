package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"rebound/api/v1alpha1"
)

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with RecoveryPolicy files",
	}
	var out outputFlag
	validate := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check RecoveryPolicy files offline, with the same rules as the apiserver",
		Long: `Parses each file strictly (unknown fields are errors), applies the defaults and
runs the checks the CRD's schema and CEL rules run at the API. Exit code 0 when
every file is valid, 1 otherwise; each problem names its field.

  rebound policy validate deploy/policy/default-recoverypolicy.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			type result struct {
				File   string   `json:"file"`
				Name   string   `json:"name,omitempty"`
				Valid  bool     `json:"valid"`
				Errors []string `json:"errors,omitempty"`
			}
			var results []result
			bad := 0
			for _, f := range files {
				r := result{File: f}
				data, err := os.ReadFile(f)
				if err != nil {
					r.Errors = []string{err.Error()}
				} else {
					p, errs := v1alpha1.ParseRecoveryPolicy(data)
					if p != nil {
						r.Name = p.Name
					}
					for _, e := range errs {
						r.Errors = append(r.Errors, e.Error())
					}
				}
				r.Valid = len(r.Errors) == 0
				if !r.Valid {
					bad++
				}
				results = append(results, r)
			}
			err := out.print(cmd.OutOrStdout(), results, func() string {
				var b strings.Builder
				for _, r := range results {
					if r.Valid {
						fmt.Fprintf(&b, "%s: RecoveryPolicy %q is valid\n", r.File, r.Name)
						continue
					}
					fmt.Fprintf(&b, "%s: invalid\n", r.File)
					for _, e := range r.Errors {
						fmt.Fprintf(&b, "  - %s\n", e)
					}
				}
				return b.String()
			})
			if err != nil {
				return err
			}
			if bad > 0 {
				return exitError{code: 1, err: fmt.Errorf("%d of %d files invalid", bad, len(files))}
			}
			return nil
		},
	}
	out.register(validate)
	cmd.AddCommand(validate)
	return cmd
}

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) ExitCode() int { return e.code }
func (e exitError) Unwrap() error { return e.err }
