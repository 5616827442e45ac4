package main

import "github.com/spf13/cobra"

// newControllerCommand is a placeholder; the real command is being written.
func newControllerCommand() *cobra.Command {
	return &cobra.Command{Use: "controller", Short: "(not yet available)", Hidden: true}
}
