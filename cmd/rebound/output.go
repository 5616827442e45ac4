package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// outputFlag is the -o/--output flag every command that prints a result
// shares: "text" for people, "json" for machines.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "text", "output format: text or json")
}

func (o *outputFlag) validate() error {
	switch o.format {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--output %q is not supported: use text or json", o.format)
}

func (o *outputFlag) json() bool { return o.format == "json" }

// print writes v as indented JSON, or text() for people.
func (o *outputFlag) print(w io.Writer, v any, text func() string) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.json() {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := io.WriteString(w, text())
	return err
}
