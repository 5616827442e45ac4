package main

import "github.com/spf13/cobra"

// newAgentCommand is a placeholder; the real command is being written.
func newAgentCommand() *cobra.Command {
	return &cobra.Command{Use: "agent", Short: "(not yet available)", Hidden: true}
}
