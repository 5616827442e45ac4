package main

import "github.com/spf13/cobra"

// newRestoreCommand is a placeholder; the real command is being written.
func newRestoreCommand() *cobra.Command {
	return &cobra.Command{Use: "restore", Short: "(not yet available)", Hidden: true}
}
