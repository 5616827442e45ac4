package cli

import (
	"github.com/spf13/cobra"

	"rebound/internal/version"
)

// NewVersionCommand is `version` of every rebound binary: the version,
// commit and build date stamped from git (internal/version).
func NewVersionCommand() *cobra.Command {
	var out Output
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, git commit and build date of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			return out.Print(cmd.OutOrStdout(), info, func() string { return info.String() + "\n" })
		},
	}
	out.Register(cmd)
	return cmd
}
