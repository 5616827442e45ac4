package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/controller"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

func newControllerCommand() *cobra.Command {
	var (
		kubeconfig string
		mgrOpts    controller.ManagerOptions
		recOpts    controller.RecoveryOptions
		stopSwitch string
		namespace  string
		logFormat  string
		verbosity  int
	)
	zc := zone.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Rescue critical pods stranded on NotReady nodes (runs as a Deployment, or locally with a kubeconfig)",
		Long: `The recovery controller watches nodes, pods, workloads and RecoveryPolicies.

When a critical pod (as a RecoveryPolicy defines it) sits on a NotReady node
longer than the policy's maxUnavailableTime, and kube-controller-manager will not
evict it in time (its zone is in PartialDisruption, or the pod's toleration is
longer), rebound moves it:

  * Deployment/ReplicaSet pods: deleted, so the ReplicaSet replaces them on a
    Ready node; if no replacement becomes available, the Deployment is scaled to
    0 and back.
  * StatefulSet pods and pods with ReadWriteOnce volumes: only once the node is
    fenced (taint node.kubernetes.io/out-of-service); until then, reported.
  * DaemonSet and static pods: never touched.

Every action is rate-limited, logged with its reason and recorded as an Event on
the workload and in the policy's status. --dry-run, spec.dryRun and the stop
switch (a ConfigMap; see --stop-switch) plan and report without acting.

The zone flags must match kube-controller-manager's, or rebound mispredicts
upstream eviction.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(cmd, logFormat, verbosity)
			if err != nil {
				return err
			}
			ctrl.SetLogger(logger)
			recOpts.ZoneConfig = zc
			if err := zc.Validate(); err != nil {
				return err
			}
			if stopSwitch != "" {
				recOpts.StopSwitch = types.NamespacedName{Namespace: namespace, Name: stopSwitch}
			}
			if mgrOpts.LeaderElectionNamespace == "" {
				mgrOpts.LeaderElectionNamespace = namespace
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			mgr, err := controller.NewManager(cfg, mgrOpts)
			if err != nil {
				return err
			}
			if err := controller.SetupRecovery(mgr, recOpts); err != nil {
				return err
			}
			logger.Info("starting rebound controller", "dryRun", recOpts.DryRun, "leaderElect", mgrOpts.LeaderElect, "stopSwitch", recOpts.StopSwitch.String())
			return mgr.Start(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	f.StringVar(&namespace, "namespace", "rebound-system", "namespace of the leader-election Lease and the stop switch")
	f.StringVar(&mgrOpts.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (0 disables it)")
	f.StringVar(&mgrOpts.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0 disables them)")
	f.BoolVar(&mgrOpts.LeaderElect, "leader-elect", false, "elect a leader among replicas, so that only one acts")
	f.DurationVar(&mgrOpts.SyncPeriod, "sync-period", 10*time.Minute, "how often the caches re-list everything, as a safety net")
	f.BoolVar(&recOpts.DryRun, "dry-run", false, "plan, log and report every action, but change nothing")
	f.StringVar(&stopSwitch, "stop-switch", "rebound-stop", "name of a ConfigMap in --namespace whose existence stops all actions cluster-wide (empty disables the switch)")
	f.DurationVar(&recOpts.Defaults.ReplacementTimeout, "replacement-timeout", rescue.DefaultReplacementTimeout, "how long a deleted pod may wait for its replacement before rebound scale-bounces its Deployment")
	f.Float64Var(&zc.UnhealthyZoneThreshold, "unhealthy-zone-threshold", zc.UnhealthyZoneThreshold, "kube-controller-manager's --unhealthy-zone-threshold")
	f.Int32Var(&zc.LargeClusterSizeThreshold, "large-cluster-size-threshold", zc.LargeClusterSizeThreshold, "kube-controller-manager's --large-cluster-size-threshold")
	f.Float64Var(&zc.EvictionLimiterQPS, "node-eviction-rate", zc.EvictionLimiterQPS, "kube-controller-manager's --node-eviction-rate")
	f.Float64Var(&zc.SecondaryEvictionLimiterQPS, "secondary-node-eviction-rate", zc.SecondaryEvictionLimiterQPS, "kube-controller-manager's --secondary-node-eviction-rate")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.IntVarP(&verbosity, "v", "v", 0, "log verbosity (0 = actions and errors, higher = more)")
	return cmd
}

// restConfig loads a kubeconfig the usual way: the flag, $KUBECONFIG,
// ~/.kube/config, then the in-cluster service account.
func restConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API to talk to: %w (pass --kubeconfig, set KUBECONFIG, or run in a pod)", err)
	}
	cfg.UserAgent = "rebound"
	return cfg, nil
}

func newLogger(cmd *cobra.Command, format string, verbosity int) (logr.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.Level(-verbosity)}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(cmd.ErrOrStderr(), opts)
	case "json":
		h = slog.NewJSONHandler(cmd.ErrOrStderr(), opts)
	default:
		return logr.Logger{}, fmt.Errorf("--log-format %q is not supported: use text or json", format)
	}
	return logr.FromSlogHandler(h), nil
}
