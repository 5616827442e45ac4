package main

import "github.com/spf13/cobra"

// newBackupCommand is a placeholder; the real command is being written.
func newBackupCommand() *cobra.Command {
	return &cobra.Command{Use: "backup", Short: "(not yet available)", Hidden: true}
}
