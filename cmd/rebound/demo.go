//go:build linux

package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"rebound/internal/lab/demo"
	"rebound/internal/lab/sandbox"
)

func newDemoCommand() *cobra.Command {
	var (
		opts demo.Options
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Play the seed failures (S1, S2, S13, S17, S4) without and with rebound, side by side, and write an HTML report",
		Long: `Builds the sandbox control plane if needed (about ` + sandbox.ColdBuildTime + ` the first time on 2 cores) and
plays each scenario in two sandboxes of 5 fake nodes at the same time: one with
only upstream's control loops, one with rebound. The scenarios run one after
the other.

S1: a critical Deployment's pod runs on node-3 and nodes 1-4 die. Without
rebound the zone enters PartialDisruption and the pod is never moved; with
rebound controller (default policy, 30 s) it is replaced on node-0.

S2: three essential Deployments run on nodes 2-4; etcd is backed up and restored
with only node-0 alive. Without rebound a wait on their status times out; with
rebound restore bringup they are Available on node-0 within the deadline.

S13: each node runs a gossiping agent; a critical pod and one of a Service's two
endpoints run on node-3, which dies outright. Without rebound nothing moves until
kube-controller-manager's node grace ends; with rebound the controller acts once
node-3's Lease and the agents' gossip both say it is dead.

S17: each node's agent also runs watchdog self-fencing (its watchdog the lab's
stand-in); a StatefulSet pod with a ReadWriteOnce volume runs on node-3, which
dies outright. Without rebound the pod stays bound to node-3 (watched for
--observe); with rebound (a policy with fencing.mode Watchdog) the controller
proves node-3 cannot be feeding its watchdog, puts the out-of-service taint on
it, the pod runs elsewhere, and node-3's return on a new boot takes the taint off.

S4 (real BIRD 1.6, no sandbox; runs beside the others from the start): 5 BIRD
daemons in a full mesh with graceful restart; nodes 1-3 die and node-1 returns
(bird -R). Without rebound it waits BIRD's 240 s graceful restart wait for the
dead peers; with rebound its agent applies the peer set of the live nodes.
Without BIRD, the demo installs it when run as root on Debian (hack/install-bird.sh,
as make test does; --install-deps=false skips this), or else reports S4 as not
played and says how to install it.

The timelines print as they happen, then a table of the time to recovery. The
same figures and a timeline chart per lane go into a self-contained HTML page
(--report, default rebound-demo.html in the current folder; it needs no network
to open; --report "" writes none).

The upstream default timings are used (50 s node grace period, 300 s tolerations);
--fast shortens them about fivefold (a run then takes about 5 minutes; BIRD's
240 s wait in S4 is never shortened).`,
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
	cmd.Flags().StringSliceVar(&opts.Scenarios, "scenarios", demo.ScenarioIDs(), "the scenarios to play (S1, S2, S13: sandboxes, one after the other; S4: real BIRD on a sandbox of its own, beside them)")
	cmd.Flags().StringVar(&opts.Report, "report", "rebound-demo.html", "write a self-contained HTML report (timeline charts, table of the time to recovery) to this file; \"\" writes none")
	cmd.Flags().BoolVar(&opts.InstallDeps, "install-deps", true, "as root with apt-get, install what a scenario needs and is missing (BIRD for S4, with hack/install-bird.sh, as make test does)")
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "keep the temporary sandbox folder (logs) after the run")
	out.register(cmd)
	return cmd
}

func contextWithTimeout(cmd *cobra.Command, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), d)
}
