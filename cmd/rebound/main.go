// Command rebound gets a Kubernetes cluster's services back, fast and
// safely, after several nodes fail or after a platform restore.
//
// This package only wires subcommands to the packages that do the work.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/internal/cli/agentcmd"
	"rebound/internal/cli/controllercmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		var ec exitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// exitCoder is an error that chooses the process exit code.
type exitCoder interface{ ExitCode() int }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rebound",
		Short: "Bring a Kubernetes cluster's services back after multi-node failures and platform restores",
		Long: `rebound closes two gaps that keep services down after several nodes fail:

  * In a zone where 3 or more nodes (and >= 55%) are NotReady, kube-controller-manager
    enters PartialDisruption and stops evicting pods, so critical pods sit on dead
    nodes for ever (and a platform restore times out).
  * A node running BIRD (Calico) that restarts while some BGP peers are dead waits
    the 240 s graceful-restart timer before it programs routes.

Start with the demo, which builds a real control plane on this machine and plays
the failure:

  rebound demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(cli.NewVersionCommand(), newSandboxCommand(), newDemoCommand(), controllercmd.NewCommand(), agentcmd.NewCommand(), newRestoreCommand(), newBackupCommand(), newPolicyCommand(), newDiagnoseCommand())
	return root
}
