package main

import (
	"io"

	"github.com/spf13/cobra"

	"rebound/internal/cli"
)

// outputFlag is the -o/--output flag every command that prints a result
// shares (cli.Output): "text" for people, "json" or "yaml" for machines.
type outputFlag struct{ cli.Output }

func (o *outputFlag) register(cmd *cobra.Command) { o.Register(cmd) }

func (o *outputFlag) validate() error { return o.Validate() }

// json reports a machine format (json or yaml): progress then goes to
// stderr and stdout carries only the result.
func (o *outputFlag) json() bool { return o.Machine() }

func (o *outputFlag) print(w io.Writer, v any, text func() string) error {
	return o.Print(w, v, text)
}
