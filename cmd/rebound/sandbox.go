//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
)

func defaultSandboxDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "rebound", "sandboxes", "default")
}

func newSandboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run a real Kubernetes control plane on this machine, with fake nodes",
		Long: `The sandbox is a real control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from their upstream Go modules,
and kwok playing the kubelets of N fake nodes. No container engine is needed.

  rebound sandbox up                 # start 5 nodes, print a kubeconfig
  rebound sandbox up --nodes 1000 --zones 3 --pods-per-node 20
                                     # a large one: 1,000 nodes, 20,000 pods
  export KUBECONFIG=...              # as printed; kubectl get nodes works
  rebound sandbox node stop node-3   # node-3's heartbeats stop: it "dies"
  rebound sandbox node start node-3  # it returns
  rebound sandbox down               # stop everything`,
	}
	cmd.AddCommand(newSandboxBuildCommand(), newSandboxUpCommand(), newSandboxDownCommand(), newSandboxStatusCommand(), newSandboxNodeCommand(), newSandboxAgentCommand())
	return cmd
}

func newSandboxBuildCommand() *cobra.Command {
	var src, confdSrc, kube string
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the control-plane binaries at their pinned versions (once per version)",
		Long: `Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
from the versions pinned in the sandbox/ module, into the user cache directory.
The first build takes about ` + sandbox.ColdBuildTime + ` on 2 cores with empty Go caches;
afterwards this returns at once.

Every supported Kubernetes release builds (the newest patch of each that its
module pins), each cached on its own:

  rebound sandbox build                      # the newest supported release
  rebound sandbox build --kubernetes 1.35    # an older one
  REBOUND_KUBERNETES=1.35 go test ./test/e2e # tests, bench and demo on it

With --confd-source it also builds Calico's confd from that folder (the tests that
run Calico's own renderer need it), into the same cache, once per version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := sandbox.EnsureBinaries(cmd.Context(), sandbox.BuildOptions{SourceDir: src, Kubernetes: kube, Progress: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), b.Dir)
			if confdSrc == "" {
				return nil
			}
			bin, err := sandbox.EnsureConfd(cmd.Context(), sandbox.ConfdBuildOptions{SourceDir: confdSrc, Progress: cmd.ErrOrStderr()})
			if err != nil {
				return fmt.Errorf("--confd-source %s: %w", confdSrc, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), bin)
			return nil
		},
	}
	cmd.Flags().StringVar(&src, "source", "", "the sandbox module folder (default: found above the working directory)")
	cmd.Flags().StringVar(&kube, "kubernetes", "", "the Kubernetes release to build, as 1.MINOR (default: $"+sandbox.KubernetesEnv+", else the newest supported); with $"+sandbox.BinDirEnv+" set nothing is built, and its binaries must be of this release")
	cmd.Flags().StringVar(&confdSrc, "confd-source", "", "also build Calico's confd from this folder (its own module, e.g. "+sandbox.ConfdSourceDefault+")")
	return cmd
}

func newSandboxUpCommand() *cobra.Command {
	var (
		dir         string
		nodes       int
		zones       int
		podsPerNode int
		fast        bool
		kube        string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a sandbox in the background and print its kubeconfig",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Kubernetes: kube, Progress: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			timings := sandbox.DefaultTimings()
			if fast {
				timings = sandbox.FastTimings()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Starting sandbox in %s\n", dir)
			opts := sandbox.Options{Dir: dir, Binaries: bins, Nodes: nodes, Zones: zones, Timings: timings, Detached: true, Progress: cmd.ErrOrStderr()}
			if podsPerNode < 0 {
				return fmt.Errorf("--pods-per-node must not be negative, got %d", podsPerNode)
			}
			if podsPerNode > 0 || nodes >= 100 {
				opts.ExtraArgs = sandbox.LargeExtraArgs()
			}
			c, err := sandbox.Start(ctx, opts)
			if err != nil {
				return err
			}
			if podsPerNode > 0 {
				if _, err := c.Populate(ctx, sandbox.Population{PodsPerNode: podsPerNode, CriticalEvery: 10, Progress: cmd.ErrOrStderr()}); err != nil {
					return fmt.Errorf("%w (the sandbox keeps running; stop it with `rebound sandbox down --dir %s`)", err, c.Dir)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", c.Kubeconfig)
			fmt.Fprintf(cmd.ErrOrStderr(), "Sandbox up: Kubernetes %s, %d nodes, apiserver %s, logs in %s.\nStop it with: rebound sandbox down --dir %s\n", c.Kubernetes, len(c.NodeNames), c.APIServerURL, filepath.Join(c.Dir, "logs"), c.Dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultSandboxDir(), "folder for the sandbox's data, certificates, kubeconfigs and logs")
	cmd.Flags().IntVar(&nodes, "nodes", 5, fmt.Sprintf("number of fake nodes (node-0 … node-N-1), 1 to %d", sandbox.MaxNodes))
	cmd.Flags().IntVar(&zones, "zones", 1, "spread the nodes evenly over this many zones (zone-a, zone-b, …)")
	cmd.Flags().IntVar(&podsPerNode, "pods-per-node", 0, "also run a workload of about this many pods per node: a DaemonSet and Deployments of 64 replicas, every 10th critical (e.g. --nodes 1000 --zones 3 --pods-per-node 20 for 20,000 pods)")
	cmd.Flags().StringVar(&kube, "kubernetes", "", "the Kubernetes release to run, as 1.MINOR (default: $"+sandbox.KubernetesEnv+", else the newest supported; built on first use)")
	cmd.Flags().BoolVar(&fast, "fast", false, "use the shortened timings of the tests (grace 12s, tolerations 20s) instead of upstream's defaults")
	return cmd
}

func newSandboxDownCommand() *cobra.Command {
	var (
		dir   string
		purge bool
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a sandbox started with `sandbox up`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sandbox.Attach(dir)
			if err != nil {
				return err
			}
			if err := c.Stop(); err != nil {
				return err
			}
			if purge {
				if err := os.RemoveAll(c.Dir); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Sandbox in %s stopped.\n", c.Dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultSandboxDir(), "the sandbox's folder")
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the folder (data, certificates and logs)")
	return cmd
}

type sandboxStatus struct {
	Dir          string                    `json:"dir"`
	Kubernetes   string                    `json:"kubernetes,omitempty"`
	APIServerURL string                    `json:"apiServerURL"`
	Kubeconfig   string                    `json:"kubeconfig"`
	Components   []sandbox.ComponentStatus `json:"components"`
	Nodes        []nodeStatus              `json:"nodes"`
	NodesError   string                    `json:"nodesError,omitempty"`
}

type nodeStatus struct {
	Name      string `json:"name"`
	Ready     bool   `json:"ready"`
	Heartbeat string `json:"heartbeat"`
	Taints    string `json:"taints,omitempty"`
}

func newSandboxStatusCommand() *cobra.Command {
	var (
		dir string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the sandbox's processes and nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			c, err := sandbox.Attach(dir)
			if err != nil {
				return err
			}
			st := sandboxStatus{Dir: c.Dir, Kubernetes: c.Kubernetes, APIServerURL: c.APIServerURL, Kubeconfig: c.Kubeconfig, Components: c.Components()}
			ctx, cancel := contextWithTimeout(cmd, 5*time.Second)
			defer cancel()
			nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				st.NodesError = err.Error()
			} else {
				for i := range nodes.Items {
					n := &nodes.Items[i]
					var taints []string
					for _, t := range n.Spec.Taints {
						taints = append(taints, t.Key+":"+string(t.Effect))
					}
					st.Nodes = append(st.Nodes, nodeStatus{Name: n.Name, Ready: kubestatus.NodeReady(n), Heartbeat: n.Labels[sandbox.HeartbeatLabel], Taints: strings.Join(taints, ",")})
				}
			}
			return out.print(cmd.OutOrStdout(), st, func() string { return st.text() })
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultSandboxDir(), "the sandbox's folder")
	out.register(cmd)
	return cmd
}

func (st sandboxStatus) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Sandbox %s\n", st.Dir)
	if st.Kubernetes != "" {
		fmt.Fprintf(&b, "Kubernetes %s\n", st.Kubernetes)
	}
	fmt.Fprintf(&b, "apiserver %s\nexport KUBECONFIG=%s\n\n", st.APIServerURL, st.Kubeconfig)
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "COMPONENT\tPID\tRUNNING\tRSS\tPEAK RSS\tLOG")
	for _, c := range st.Components {
		fmt.Fprintf(w, "%s\t%d\t%v\t%.0f MiB\t%.0f MiB\t%s\n", c.Name, c.PID, c.Running, c.RSSMiB, c.PeakRSSMiB, c.Log)
	}
	w.Flush()
	b.WriteString("\n")
	if st.NodesError != "" {
		fmt.Fprintf(&b, "nodes: cannot list: %s\n", st.NodesError)
		return b.String()
	}
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tREADY\tHEARTBEAT\tTAINTS")
	for _, n := range st.Nodes {
		fmt.Fprintf(w, "%s\t%v\t%s\t%s\n", n.Name, n.Ready, n.Heartbeat, n.Taints)
	}
	w.Flush()
	return b.String()
}

func newSandboxNodeCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Make a fake node die (stop) or return (start)",
	}
	for _, action := range []struct {
		use, short string
		on         bool
	}{
		{"stop NODE...", "Stop the nodes' heartbeats: NotReady after the node monitor grace period", false},
		{"start NODE...", "Resume the nodes' heartbeats: Ready again within a second", true},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   action.use,
			Short: action.short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, names []string) error {
				c, err := sandbox.Attach(dir)
				if err != nil {
					return err
				}
				ctx, cancel := contextWithTimeout(cmd, 10*time.Second)
				defer cancel()
				for _, n := range names {
					if action.on {
						err = c.StartNode(ctx, n)
					} else {
						err = c.StopNode(ctx, n)
					}
					if err != nil {
						return err
					}
				}
				return nil
			},
		})
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", defaultSandboxDir(), "the sandbox's folder")
	return cmd
}
