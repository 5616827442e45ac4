package main

import (
	"github.com/spf13/cobra"

	"rebound/internal/version"
)

func newVersionCommand() *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of rebound",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			return out.print(cmd.OutOrStdout(), info, func() string { return info.String() + "\n" })
		},
	}
	out.register(cmd)
	return cmd
}
