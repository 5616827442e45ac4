// Command kubectl-rebound is rebound as a kubectl plugin. Put it on PATH and
// run
//
//	kubectl rebound diagnose
//
// It runs the same diagnose command as `rebound diagnose` (pkg/diagnose),
// with the same flags, output and exit codes: 0 nothing blocks recovery,
// 1 something does, 2 the cluster could not be read.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/pkg/diagnose"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(diagnose.ExitCodeOf(err))
	}
}

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
	root.AddCommand(diagnose.NewCommand(), cli.NewVersionCommand())
	return root
}
