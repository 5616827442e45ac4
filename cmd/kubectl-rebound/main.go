// Command kubectl-rebound is rebound as a kubectl plugin. Put it on PATH and
// run
//
//	kubectl rebound diagnose
//
// It runs the same diagnose command as `rebound diagnose`
// (internal/cli/diagnosecmd),
// with the same flags, output and exit codes: 0 nothing blocks recovery,
// 1 something does, 2 the cluster could not be read.
package main

import (
	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/internal/cli/diagnosecmd"
	"rebound/pkg/diagnose"
)

// main prints errors after kubectl's own "error: " prefix. An error
// diagnose does not mark (an unknown command of the plugin) is a usage
// error: exit 2, as diagnose's bad flags, never 1, which means something
// blocks.
func main() { cli.Main(newRootCommand(), "error: ", diagnose.ExitCannotRead) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-rebound",
		Short: "rebound as a kubectl plugin: explain why a cluster is not recovering",
		Long: `rebound brings a cluster's services back after multi-node failures. As a kubectl
plugin it offers its read-only part:

  kubectl rebound diagnose          # zones, stranded critical pods, BGP, workloads
  kubectl rebound diagnose -o json  # the same, as JSON (docs/diagnose.md)

Install: put the kubectl-rebound binary on PATH (go build -o ~/bin/kubectl-rebound ./cmd/kubectl-rebound).`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl rebound"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return diagnose.CannotRead(err) })
	root.AddCommand(diagnosecmd.NewCommand(), cli.NewVersionCommand())
	return root
}
