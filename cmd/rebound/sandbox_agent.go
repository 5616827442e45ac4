//go:build linux

package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"rebound/internal/agent"
	"rebound/internal/cli/agentcmd"
	"rebound/internal/lab/linkcut"
	"rebound/internal/lab/watchdogstandin"
)

// newSandboxAgentCommand is `rebound sandbox agent`: the agent command
// itself, run for a sandbox's kwok node, whose watchdog and boot ID the
// lab stands in for. Hidden: only the lab starts it.
func newSandboxAgentCommand() *cobra.Command {
	var socket, bootID, cutFile string
	cmd := agentcmd.NewLabCommand(agentcmd.LabHooks{
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&socket, "lab-watchdog-socket", "", "the lab's watchdog stand-in for this node (a Unix socket the lab serves); enables fencing as --watchdog-device does")
			f.StringVar(&bootID, "lab-boot-id", "", "this node's boot ID as the lab numbers its boots (the Node's status.nodeInfo.bootID)")
			f.StringVar(&cutFile, "lab-cut-file", "", "a file naming, one per line, the addresses whose links the lab has cut: gossip and fencing traffic to and from them is dropped")
		},
		Configure: func(o *agent.Options) error {
			if (socket == "") != (bootID == "") {
				return errors.New("rebound sandbox agent: --lab-watchdog-socket and --lab-boot-id go together")
			}
			if socket != "" {
				o.Fencing.Open = watchdogstandin.Dial(socket)
				o.Fencing.BootID = bootID
			}
			if cutFile != "" {
				o.Gossip.Cut = linkcut.Reader(cutFile, 200*time.Millisecond)
			}
			return nil
		},
	})
	cmd.Short = "Run the agent for a sandbox node, with the lab's watchdog stand-in"
	cmd.Hidden = true
	return cmd
}
