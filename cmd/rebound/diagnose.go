package main

import (
	"github.com/spf13/cobra"

	"rebound/pkg/diagnose"
)

// newDiagnoseCommand is `rebound diagnose`: a read-only explanation of why
// the cluster is not recovering. The command lives in pkg/diagnose so that
// the kubectl plugin (cmd/kubectl-rebound) runs the very same one. Its
// errors carry their exit code (0 nothing blocks, 1 something blocks,
// 2 cannot read the cluster) through main's exitCoder.
func newDiagnoseCommand() *cobra.Command {
	return diagnose.NewCommand()
}
