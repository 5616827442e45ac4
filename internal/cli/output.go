package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"rebound/pkg/exitcode"
)

// Output is the -o/--output flag of every command that prints a result:
// "text" for people, "json" or "yaml" for machines.
type Output struct{ Format string }

// Register adds -o/--output to cmd.
func (o *Output) Register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.Format, "output", "o", "text", "output format: text, json or yaml")
}

// Validate fails on an unknown format, naming the flag.
func (o *Output) Validate() error {
	switch o.Format {
	case "text", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q is not supported: use text, json or yaml", o.Format)
}

// Machine reports whether the output is for programs (json or yaml):
// progress for people then belongs on stderr.
func (o *Output) Machine() bool { return o.Format == "json" || o.Format == "yaml" }

// Print writes v as indented JSON or as YAML, or text() for people.
func (o *Output) Print(w io.Writer, v any, text func() string) error {
	if err := o.Validate(); err != nil {
		return err
	}
	switch o.Format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err := io.WriteString(w, text())
	return err
}

// BadFlag is the flag error function of every binary's root command
// (cobra hands it down to the subcommands that set none): a mistyped
// flag is bad input, exit code 2 (pkg/exitcode), not a failure.
func BadFlag(_ *cobra.Command, err error) error { return exitcode.Usage(err) }
