// Command rebound-manager is what runs in the cluster: the recovery and
// peering controller (a Deployment) and the BGP node agent (a DaemonSet).
// It is the binary of the container image.
//
// It carries only those two commands and version, so it links none of the
// operator CLI's etcd server, sandbox, demo or BIRD-lab code; the test
// beside this file keeps it so. The commands are the very ones `rebound
// controller` and `rebound agent` run (internal/cli).
package main

import (
	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/internal/cli/agentcmd"
	"rebound/internal/cli/controllercmd"
	"rebound/pkg/exitcode"
)

func main() { cli.Main(newRootCommand(), "Error: ", exitcode.Failed) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rebound-manager",
		Short: "rebound's in-cluster binary: the controller (Deployment) and the BGP node agent (DaemonSet)",
		Long: `rebound-manager is the binary of rebound's container image. It runs

  rebound-manager controller --leader-elect   # the Deployment (deploy/controller)
  rebound-manager agent --node-name=$NODE_NAME ...  # the DaemonSet beside BIRD (deploy/agent)

The same commands are in the operator CLI as "rebound controller" and
"rebound agent", for runs outside the cluster with a kubeconfig.

Exit codes: 0 stopped cleanly, 1 failure, 2 bad input (a flag or an argument).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(cli.BadFlag)
	root.AddCommand(controllercmd.NewCommand(), agentcmd.NewCommand(), cli.NewVersionCommand())
	return root
}
