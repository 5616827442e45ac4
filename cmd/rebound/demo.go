package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"rebound/internal/demo"
)

func newDemoCommand() *cobra.Command {
	var (
		opts demo.Options
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Play the seed failure (S1) on two real control planes, without and with rebound",
		Long: `Builds the sandbox control plane if needed (about 5 minutes the first time) and
starts two sandboxes of 5 fake nodes in one zone. In both, a critical Deployment's
pod runs on node-3 and nodes 1-4 die. In the first only kube-controller-manager
decides: the zone enters PartialDisruption and the pod is never moved. In the
second, rebound controller runs too, with its default policy (30 s): the pod is
replaced on node-0 while the zone is still in PartialDisruption. The timeline
shows both as they happen, then a table of the time to recovery.

The upstream default timings are used (50 s node grace period, 300 s tolerations),
so a run takes about 4 minutes; --fast shortens them about fivefold.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			opts.JSON = out.json()
			opts.Out = cmd.OutOrStdout()
			opts.Progress = cmd.ErrOrStderr()
			return demo.Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Fast, "fast", false, "shortened timings (node grace 12s, tolerations 20s) instead of upstream's defaults")
	cmd.Flags().DurationVar(&opts.Observe, "observe", 90*time.Second, "how long the lane without rebound watches the stranded pod after its node is NotReady")
	cmd.Flags().StringVar(&opts.Dir, "dir", "", "sandbox folder (default: a temporary folder, removed afterwards)")
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "keep the temporary sandbox folder (logs) after the run")
	out.register(cmd)
	return cmd
}

func contextWithTimeout(cmd *cobra.Command, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), d)
}
