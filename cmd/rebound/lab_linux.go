package main

import "github.com/spf13/cobra"

// labCommands are the commands that run the sandbox control plane and
// BIRD on this machine: Linux only (process groups die with their parent
// through Pdeathsig; BIRD is a Linux daemon).
func labCommands() []*cobra.Command {
	return []*cobra.Command{newSandboxCommand(), newDemoCommand()}
}
