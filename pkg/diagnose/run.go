package diagnose

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/internal/cli"
	"rebound/pkg/peering"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// Exit codes of `rebound diagnose`.
const (
	// ExitOK: nothing blocks recovery (something may still be pending).
	ExitOK = 0
	// ExitBlocking: something blocks recovery (Report.Blocking).
	ExitBlocking = 1
	// ExitCannotRead: diagnose could not look at the cluster: the API
	// server is unreachable, the credentials are rejected, the rights are
	// too few, or the kubeconfig or a flag is wrong.
	ExitCannotRead = 2
)

// DefaultTimeout is the per-request timeout: an unreachable API server
// fails in seconds.
const DefaultTimeout = 10 * time.Second

// Options configure Run.
type Options struct {
	// Kubeconfig is the kubeconfig file; "" means $KUBECONFIG,
	// ~/.kube/config, then the in-cluster service account. Context picks
	// a kubeconfig context other than the current one.
	Kubeconfig string
	Context    string
	// Config, when set, is used instead of Kubeconfig and Context.
	Config *rest.Config
	// ZoneConfig is kube-controller-manager's node lifecycle flags; the
	// zero value means its defaults.
	ZoneConfig zone.Config
	// Defaults are the controller's own knobs (replacement timeout).
	Defaults rescue.Defaults
	// Peering is the peering controller's planner configuration (prune
	// grace period); SessionReportMaxAge its --session-report-max-age.
	Peering             peering.Config
	SessionReportMaxAge time.Duration
	// Timeout bounds each request to the API server; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
}

// Run reads the cluster and explains it. It returns the report and the
// exit code: ExitOK or ExitBlocking with a nil error, or ExitCannotRead
// with an *Error whose message is one line.
func Run(ctx context.Context, opts Options) (Report, int, error) {
	opts.ZoneConfig = opts.ZoneConfig.WithDefaults()
	if err := opts.ZoneConfig.Validate(); err != nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: oneLine(err.Error()), Err: err}
	}
	if err := opts.Peering.Validate(); err != nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: oneLine(err.Error()), Err: err}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg := opts.Config
	if cfg == nil {
		var err error
		if cfg, err = loadConfig(opts.Kubeconfig, opts.Context); err != nil {
			return Report{}, ExitCannotRead, err
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = opts.Timeout
	cfg.UserAgent = "rebound-diagnose"
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: "bad client configuration: " + oneLine(err.Error()), Err: err}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: "bad client configuration: " + oneLine(err.Error()), Err: err}
	}

	snap, extra, err := Gather(ctx, Clients{Kube: kube, Dynamic: dyn, Host: cfg.Host, Timeout: opts.Timeout}, opts.Now())
	if err != nil {
		return Report{}, ExitCannotRead, err
	}
	snap.ZoneConfig = opts.ZoneConfig
	snap.Defaults = opts.Defaults
	extra.Peering = opts.Peering
	extra.SessionReportMaxAge = opts.SessionReportMaxAge
	r := Explain(snap, extra)
	if r.Blocking {
		return r, ExitBlocking, nil
	}
	return r, ExitOK, nil
}

// loadConfig loads a kubeconfig the way the command line does
// (internal/cli): the path, $KUBECONFIG, ~/.kube/config, then the
// in-cluster service account.
func loadConfig(path, context string) (*rest.Config, error) {
	k := cli.NewKubeFlags()
	k.KubeConfig, k.Overrides.CurrentContext = path, context
	cfg, err := k.RESTConfig("rebound-diagnose")
	if err != nil {
		return nil, &Error{Code: ExitCannotRead, Err: err, Msg: oneLine(err.Error())}
	}
	return cfg, nil
}

// NewCommand returns the diagnose command, shared by `rebound diagnose`
// and the kubectl plugin `kubectl rebound diagnose`. Errors it returns
// carry their exit code (ExitCodeOf).
func NewCommand() *cobra.Command {
	var (
		opts   Options
		kube   *cli.KubeFlags
		output cli.Output
	)
	zc := zone.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Explain why the cluster is not recovering (read-only)",
		Long: `diagnose reads the cluster, read-only, and explains what keeps services from
coming back, most serious first, each line with its cause first:

  * zones: each zone's state as kube-controller-manager's node lifecycle
    controller computes it (Normal, PartialDisruption, FullDisruption), the
    numbers that put it there (NotReady/total against --unhealthy-zone-threshold,
    zone size against --large-cluster-size-threshold) and the NoExecute eviction
    rate in force. Rate 0 means pods on the zone's NotReady nodes are NEVER
    evicted: that is how critical pods get stranded after a multi-node outage;
  * critical pods (as a RecoveryPolicy defines them) on NotReady nodes: since
    when, when upstream eviction would move each (or never), and what rebound
    does about it or why it will not, in the recovery controller's own words
    (the same planner decides), e.g. "StatefulSet pod: waiting for fencing";
  * BGP: the peers each node's BIRD waits for in graceful-restart recovery, from
    the reports of rebound agent, and the nodes left out of the peer set, with why;
  * Deployments, StatefulSets and DaemonSets that are not Available, with the
    first reason (a pod on a NotReady node, an unschedulable pod, a crash loop).

It only gets and lists nodes, pods, namespaces, PVCs, ReplicaSets, Deployments,
StatefulSets, DaemonSets and RecoveryPolicies: the ClusterRole rebound-diagnose
(deploy/rbac) is all it needs. Without the RecoveryPolicy CRD it assumes the
default policy (deploy/policy/default-recoverypolicy.yaml: kube-system pods of
priority class system-cluster-critical or system-node-critical) and says so.

Set the zone flags to kube-controller-manager's values, or zone states and
eviction times are wrong (they default to kube-controller-manager's defaults).

Exit codes:
  0  nothing blocks recovery (something may still be pending)
  1  something blocks recovery: a finding of impact Blocking
  2  diagnose could not look: the API server cannot be reached, the credentials
     are rejected, the rights are too few, or a flag or the kubeconfig is wrong;
     one line on stderr says which

-o json prints the report in the schema of docs/diagnose.md (schemaVersion 1).`,
		Example: `  rebound diagnose
  rebound diagnose -o json | jq '.findings[] | select(.impact == "Blocking")'
  kubectl rebound diagnose --context prod --unhealthy-zone-threshold 0.6
  rebound diagnose --kubeconfig admin.conf --timeout 3s`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &Error{Code: ExitCannotRead, Msg: fmt.Sprintf("diagnose takes no arguments, got %q (see --help)", args)}
			}
			return nil
		},
		// The caller prints the error (one line) and exits with its code;
		// usage after a failed API call would only bury that line.
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return &Error{Code: ExitCannotRead, Msg: err.Error(), Err: err}
			}
			opts.ZoneConfig = zc
			cfg, err := kube.RESTConfig("rebound-diagnose")
			if err != nil {
				return &Error{Code: ExitCannotRead, Msg: oneLine(err.Error()), Err: err}
			}
			opts.Config = cfg
			r, code, err := Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch output.Format {
			case "json":
				err = WriteJSON(w, r)
			case "yaml":
				err = output.Print(w, r, nil)
			default:
				err = WriteText(w, r)
			}
			if err != nil {
				return &Error{Code: ExitCannotRead, Msg: "write the report: " + err.Error(), Err: err}
			}
			if code != ExitOK {
				return &Error{Code: code, Msg: r.Summary}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &Error{Code: ExitCannotRead, Msg: err.Error() + " (see --help)", Err: err}
	})
	f := cmd.Flags()
	kube = cli.AddKubeFlags(cmd, cli.Omit{Namespace: true})
	output.Register(cmd)
	f.DurationVar(&opts.Timeout, "timeout", DefaultTimeout, "give up on a request to the API server after this long")
	f.Float64Var(&zc.UnhealthyZoneThreshold, "unhealthy-zone-threshold", zc.UnhealthyZoneThreshold, "kube-controller-manager's --unhealthy-zone-threshold")
	f.Int32Var(&zc.LargeClusterSizeThreshold, "large-cluster-size-threshold", zc.LargeClusterSizeThreshold, "kube-controller-manager's --large-cluster-size-threshold")
	f.Float64Var(&zc.EvictionLimiterQPS, "node-eviction-rate", zc.EvictionLimiterQPS, "kube-controller-manager's --node-eviction-rate")
	f.Float64Var(&zc.SecondaryEvictionLimiterQPS, "secondary-node-eviction-rate", zc.SecondaryEvictionLimiterQPS, "kube-controller-manager's --secondary-node-eviction-rate")
	f.DurationVar(&opts.Defaults.ReplacementTimeout, "replacement-timeout", rescue.DefaultReplacementTimeout, "the controller's --replacement-timeout: how long a deleted pod may wait for its replacement before a scale bounce")
	f.DurationVar(&opts.Peering.PruneGracePeriod, "prune-grace-period", peering.DefaultPruneGracePeriod, "the peering controller's prune grace period: how long a node stays in the BGP peer set after it goes NotReady")
	f.DurationVar(&opts.SessionReportMaxAge, "session-report-max-age", peering.DefaultReportMaxAge, "agents' BGP session reports older than this are stale")
	return cmd
}
