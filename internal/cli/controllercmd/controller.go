// Package controllercmd is the `controller` command, shared by rebound (run
// it locally with a kubeconfig) and rebound-manager (the image).
package controllercmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/cli"
	"rebound/internal/controller"
	"rebound/internal/logging"
	"rebound/internal/metricsserving"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/calico"
	"rebound/pkg/unreachable"
)

// controllerGCPercent is the controller's GOGC unless the environment sets
// one.
const controllerGCPercent = 50

// leaderElectionID names the leader-election Lease in --namespace: the ID
// controller.NewManager gives controller-runtime's election.
const leaderElectionID = "rebound-controller"

// DefaultNamespace holds the leader-election Lease and the stop switch
// unless -n says otherwise.
const DefaultNamespace = "rebound-system"

// NewCommand returns `controller`.
func NewCommand() *cobra.Command {
	var (
		kube       *cli.KubeFlags
		logFlags   *logging.Flags
		mgrOpts    controller.ManagerOptions
		recOpts    controller.RecoveryOptions
		stopSwitch string

		peeringOn     bool
		peeringOpts   controller.PeeringOptions
		peeringNodes  string
		calicoOn      bool
		calicoRestart time.Duration
		calicoGroup   string
		noRecovery    bool
		leasePlane    bool
		markEarly     bool
	)
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

Of several controllers (the Deployment's replicas, or a run from a laptop beside
it) only the holder of the leader-election Lease rebound-controller in --namespace
acts; the others wait, and say at start who holds it. --leader-elect=false turns
that off, for tests only: two controllers acting at once double the actions and
publish two peer sets.

The zone flags must match kube-controller-manager's, or rebound mispredicts
upstream eviction.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			slogger, logger, err := logFlags.Setup(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			logging.Set(slogger.Handler())
			if os.Getenv("GOGC") == "" {
				// The heap is mostly the caches, which live as long as the
				// process: Go's default (GOGC=100) lets it grow to twice
				// that before collecting. Half the headroom keeps RSS near
				// the working set (rebound-bench scale at 1,000 nodes and
				// 20,000 pods, docs/scale.md) for little CPU, since little
				// is allocated at rest. GOGC in the environment wins.
				debug.SetGCPercent(controllerGCPercent)
			}
			namespace := kube.Namespace(DefaultNamespace)
			// The peering planner gives nodes the same grace after a stall.
			peeringOpts.Config.NodeGracePeriod = recOpts.ZoneConfig.WithDefaults().NodeMonitorGracePeriod
			if err := errors.Join(recOpts.ZoneConfig.Validate(), cli.ValidateDetection(peeringOpts.Config.Evidence)); err != nil {
				return err
			}
			if cmd.Flags().Changed("lease-margin") && !leasePlane {
				return errors.New("--lease-margin needs --lease-plane: without the Lease plane no Lease is timed")
			}
			if markEarly && !leasePlane {
				return errors.New("--mark-pods-not-ready-early needs --lease-plane: without the Lease plane no node is ever found dead on both planes")
			}
			if cmd.Flags().Changed("calico-api-group") && !calicoOn {
				return errors.New("--calico-api-group needs --calico: without the Calico backend no BGPPeer is written")
			}
			group, err := calico.ParseAPIGroup(calicoGroup)
			if err != nil {
				return fmt.Errorf("--calico-api-group %q: want one of %s (calico-node's CALICO_API_GROUP, or auto)", calicoGroup, strings.Join(calico.APIGroupValues, ", "))
			}
			calicoGroup = group
			if stopSwitch != "" {
				recOpts.StopSwitch = types.NamespacedName{Namespace: namespace, Name: stopSwitch}
			}
			if mgrOpts.LeaderElectionNamespace == "" {
				mgrOpts.LeaderElectionNamespace = namespace
			}
			cfg, err := kube.RESTConfig("rebound-controller")
			if err != nil {
				return err
			}
			if err := controller.Preflight(cmd.Context(), cfg, controller.PreflightOptions{Recovery: !noRecovery, Namespace: preflightNamespace(namespace, mgrOpts.LeaderElect || peeringOn)}); err != nil {
				return err
			}
			mgr, err := controller.NewManager(cfg, mgrOpts)
			if err != nil {
				return err
			}
			// One tracker: both planners count NotReady from the same first
			// sight.
			tracker := &liveness.Tracker{}
			peeringOpts.Tracker = tracker
			var leases *liveness.LeaseTracker
			if leasePlane {
				leases = &liveness.LeaseTracker{}
				if err := controller.SetupLeasePlane(mgr, leases, nil); err != nil {
					return err
				}
			}
			// The peering planner reads the same Lease plane: without it
			// the gossip plane confirms no death there either.
			peeringOpts.Leases = leases
			// One history of the planes' disagreements for every planner:
			// the verdicts feed it each pass. It begins with the first pass
			// (of this process, or of this leader), and holds early
			// judgement for one --gossip-distrust-window from then.
			distrust := &liveness.DistrustTracker{}
			peeringOpts.Distrust = distrust
			var reports client.Reader
			if peeringOn || leasePlane {
				// Agents report their sessions where peering runs, and
				// their gossip where they gossip: then the verdicts get
				// the network's plane.
				reports = mgr.GetClient()
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("API client for the verdicts' Events: %w", err)
			}
			// The one judge: every planner (rescue, the early marks,
			// peering) reads its verdicts, over the same trackers.
			judge := controller.NewJudge(reports, tracker, leases, distrust, controller.EventWriter(cs), peeringOpts.Config.WithDefaults().Evidence)
			verdicts := judge.Assess
			peeringOpts.Liveness = verdicts
			if !noRecovery {
				recOpts.WatchReports = reports != nil
				recOpts.Liveness, recOpts.Recheck = verdicts, judge.Peek
				if leasePlane {
					recOpts.LeaseRenewTimes = controller.CachedLeaseRenewTimes(mgr.GetClient())
				}
				var targets *controller.FencingTargets
				if leasePlane {
					// Watchdog fencing needs the two planes' verdict.
					targets = controller.NewFencingTargets()
					recOpts.FencingTargets = targets
				}
				if err := controller.SetupRecovery(mgr, recOpts); err != nil {
					return err
				}
				if targets != nil {
					if err := controller.SetupFencing(mgr, controller.FencingOptions{
						Liveness:   verdicts,
						Targets:    targets,
						Document:   types.NamespacedName{Namespace: namespace, Name: controller.DefaultFencingDocument},
						DryRun:     recOpts.DryRun,
						StopSwitch: recOpts.StopSwitch,
					}); err != nil {
						return err
					}
				}
			}
			// Always, whatever the flags: without the Lease plane it only
			// takes off the rebound.dev/unreachable taints an earlier run
			// left, so that turning detection off leaves no node marked.
			if err := controller.SetupUnreachable(mgr, controller.UnreachableOptions{
				Plan:         unreachable.Options{MarkPodsNotReady: markEarly},
				Liveness:     verdicts,
				WatchReports: reports != nil,
				WatchLeases:  leasePlane,
				DryRun:       recOpts.DryRun,
				StopSwitch:   recOpts.StopSwitch,
			}); err != nil {
				return err
			}
			if peeringOn {
				if err := peeringOpts.Config.Validate(); err != nil {
					return err
				}
				if peeringNodes != "" {
					sel, err := labels.Parse(peeringNodes)
					if err != nil {
						return fmt.Errorf("--peering-node-selector %q: %w", peeringNodes, err)
					}
					peeringOpts.NodeSelector = sel
				}
				if calicoOn {
					peeringOpts.Calico = &calico.PeerOptions{MaxRestartTime: calicoRestart, APIGroup: calicoGroup}
					if err := peeringOpts.Calico.Validate(); err != nil {
						return err
					}
					logCalicoAPIGroup(logger, cfg, calicoGroup)
				}
				peeringOpts.DryRun = recOpts.DryRun
				peeringOpts.State.Namespace = namespace
				peeringOpts.PeerSet.Namespace = namespace
				// The stop switch stops peering changes too.
				peeringOpts.StopSwitch = recOpts.StopSwitch
				if err := controller.SetupPeering(mgr, peeringOpts); err != nil {
					return err
				}
			}
			logger.Info("starting rebound controller", "recovery", !noRecovery, "peering", peeringOn, "calico", calicoOn,
				"leasePlane", leasePlane, "markPodsNotReadyEarly", markEarly, "dryRun", recOpts.DryRun, "leaderElect", mgrOpts.LeaderElect, "stopSwitch", recOpts.StopSwitch.String())
			if mgrOpts.LeaderElect {
				// The manager waits for the Lease without a word; say once
				// who holds it, so that a second run beside the Deployment
				// is seen to wait, not to hang.
				if cs, err := kubernetes.NewForConfig(cfg); err == nil {
					if msg := leaseHolder(cmd.Context(), cs, mgrOpts.LeaderElectionNamespace, time.Now()); msg != "" {
						logger.Info(msg, "lease", mgrOpts.LeaderElectionNamespace+"/"+leaderElectionID)
					}
				}
			} else {
				logger.Info("leader election is off (--leader-elect=false): this process acts even if another rebound controller runs; for tests only")
			}
			return mgr.Start(cmd.Context())
		},
	}
	f := cmd.Flags()
	kube = cli.AddKubeFlags(cmd, cli.Omit{})
	f.Lookup("namespace").Usage = "namespace of the leader-election Lease and the stop switch (default " + DefaultNamespace + ")"
	logFlags = logging.AddFlags(cmd)
	metricsserving.AddFlags(f, &mgrOpts.Metrics, ":8443")
	f.StringVar(&mgrOpts.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0 disables them)")
	f.BoolVar(&mgrOpts.LeaderElect, "leader-elect", true, "act only while holding the leader-election Lease "+leaderElectionID+" in --namespace, so that of several controllers (replicas, or a run beside the Deployment) one acts and the others wait; --leader-elect=false is for tests only")
	f.DurationVar(&mgrOpts.SyncPeriod, "sync-period", 10*time.Minute, "how often the caches re-list everything, as a safety net")
	f.BoolVar(&recOpts.DryRun, "dry-run", false, "plan, log and report every action, but change nothing")
	f.StringVar(&stopSwitch, "stop-switch", controller.DefaultStopSwitch, "name of a ConfigMap in --namespace whose existence stops all actions cluster-wide (empty disables the switch)")
	cli.AddReplacementTimeoutFlag(f, &recOpts.Defaults)
	cli.AddZoneFlags(f, &recOpts.ZoneConfig)
	f.BoolVar(&leasePlane, "lease-plane", false, "watch the nodes' Leases (kube-node-lease) and time their renewals on rebound's clock; with the agents' gossip (rebound agent --gossip-key-file) a node dead on both planes is known about one renew interval after death, before kube-controller-manager's node grace (docs/detection.md)")
	f.BoolVar(&markEarly, "mark-pods-not-ready-early", false, "with --lease-plane: mark the pods of a node dead on both planes (Lease and gossip) not ready while the API still has it Ready, as kube-controller-manager does once it is NotReady, so that Services stop sending it traffic; a node cut off but alive loses its traffic until its kubelet reports again (docs/detection.md)")
	f.BoolVar(&noRecovery, "no-recovery", false, "do not run the recovery controller (for a peering-only deployment)")
	f.BoolVar(&peeringOn, "peering", false, "run the BGP peering controller: publish the health-aware peer set in ConfigMap <namespace>/rebound-peer-set, which each rebound agent reads, and as the node label peering.rebound.dev/in-set (for Calico)")
	cli.AddPeeringFlags(f, &peeringOpts.Config)
	cli.AddDetectionFlags(f, &peeringOpts.Config.Evidence)
	f.BoolVar(&peeringOpts.Config.Disabled, "peering-keep-all", false, "global opt-out: keep every node in the mesh (labels are still published)")
	f.StringVar(&peeringNodes, "peering-node-selector", "", "label selector of the nodes that run BGP (default: all nodes)")
	f.Uint16Var(&peeringOpts.Config.DefaultBGPPort, "bgp-port", 179, "with --peering: the BGP port published for a node without the peering.rebound.dev/bgp-port annotation whose agent does not report one (rebound agent --listen-port, default 179 too)")
	f.BoolVar(&calicoOn, "calico", false, "with --peering: also publish a Calico BGPPeer (in the API group calico-node reads: --calico-api-group) that meshes the nodes of the set; see docs/peering-calico.md for turning Calico's node-to-node mesh off")
	f.StringVar(&calicoGroup, "calico-api-group", calico.APIGroupAuto, "with --calico: the API group the BGPPeer is written to, which must be the one calico-node reads: auto (as calico-node's confd with CALICO_API_GROUP unset: "+calico.APIGroupV1+" whenever that group is served, even beside "+calico.APIGroupV3+"; "+calico.APIGroupV3+" only where it alone is served), "+calico.APIGroupV1+" or "+calico.APIGroupV3+" (set it to calico-node's CALICO_API_GROUP where that is set; a group the API server does not serve is an error)")
	f.DurationVar(&calicoRestart, "calico-max-restart-time", 0, "with --calico: the BGPPeer's maxRestartTime (BIRD's per-peer graceful restart time; 0 keeps Calico's 120s)")
	return cmd
}

// logCalicoAPIGroup says at start which API group the Calico BGPPeer goes
// to and why. The peering controller chooses again at every pass (Calico's
// CRDs may come later, or change), logs a change, and publishes the choice
// on the peer-set ConfigMap; a failure here is only logged, as the
// controller keeps trying and reports it there.
func logCalicoAPIGroup(logger logr.Logger, cfg *rest.Config, setting string) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err == nil {
		var choice calico.APIGroupChoice
		if choice, err = calico.DiscoverAPIGroup(d, setting); err == nil {
			logger.Info("Calico BGPPeer API group", "apiGroup", choice.APIGroup(), "reason", choice.Reason, "setting", setting)
			return
		}
	}
	logger.Error(err, "Calico BGPPeer: no API group to write it to yet", "setting", setting)
}

// leaseHolder describes who holds the leader-election Lease, when another
// holder's lease is current: this process will wait for it. "" when the
// Lease is free, expired, absent or cannot be read (the manager's own
// election reports real errors).
func leaseHolder(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := client.CoordinationV1().Leases(namespace).Get(ctx, leaderElectionID, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder == "" || l.Spec.RenewTime == nil {
		return ""
	}
	duration := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	renewed := l.Spec.RenewTime.Time
	if duration > 0 && now.After(renewed.Add(duration)) {
		return ""
	}
	return fmt.Sprintf("waiting for the leader-election Lease, held by %s (renewed %s ago, lease %s): this controller acts only once that holder stops or fails to renew it",
		holder, now.Sub(renewed).Round(time.Second), duration)
}

// preflightNamespace is the namespace the controller cannot run without:
// --namespace when it holds the leader-election Lease or the peering
// state; otherwise none (the stop switch simply cannot exist there).
func preflightNamespace(namespace string, needed bool) string {
	if needed {
		return namespace
	}
	return ""
}
