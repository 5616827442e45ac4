// Command rebound gets a Kubernetes cluster's services back, fast and
// safely, after several nodes fail or after a platform restore.
//
// This package only wires subcommands to the packages that do the work.
package main

import (
	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/internal/cli/agentcmd"
	"rebound/internal/cli/controllercmd"
	"rebound/internal/cli/diagnosecmd"
	"rebound/internal/cli/untaintcmd"
	"rebound/pkg/exitcode"
)

func main() { cli.Main(newRootCommand(), "Error: ", exitcode.Failed) }

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

  rebound demo

Exit codes: 0 success, 1 failure, 2 bad input (a flag, an argument or a file;
nothing was done). diagnose and restore add their own (see their --help).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(cli.BadFlag)
	root.AddCommand(labCommands()...)
	root.AddCommand(cli.NewVersionCommand(), controllercmd.NewCommand(), agentcmd.NewCommand(), newRestoreCommand(), newBackupCommand(), newPolicyCommand(), diagnosecmd.NewCommand(), untaintcmd.NewCommand())
	return root
}
