package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/cli"
	"rebound/internal/cli/controllercmd"
	"rebound/pkg/etcdsnapshot"
	"rebound/pkg/rescue"
	"rebound/pkg/restore"
	"rebound/pkg/stopswitch"
	"rebound/pkg/zone"
)

func newRestoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a platform: etcd from a snapshot, then the essential workloads on the surviving nodes",
		Long: `After a platform restore the control plane comes back on the surviving node(s) while
other nodes are still down. In a zone where 3 or more nodes (and >= 55%) are NotReady,
kube-controller-manager evicts nothing, so essential pods that ran on the dead nodes
are never replaced and the restore times out. rebound closes the gap:

  rebound backup --etcd-endpoint URL --out backup.db      # before: snapshot + backup.db.meta.json
  rebound restore etcd --snapshot backup.db --data-dir D  # restore it into a new etcd data dir
  (start etcd and the control plane on D)
  rebound restore bringup --policy policy.yaml            # reschedule and wait on workload status

Exit codes: 0 success, 1 other failure, 2 bad input (nothing changed),
3 timeout, 4 refused as unsafe (needs fencing, the stop switch is pulled, or the
policy is suspended).`,
	}
	cmd.AddCommand(newRestoreBringupCommand(), newRestoreEtcdCommand())
	for _, c := range cmd.Commands() {
		c.SetFlagErrorFunc(badFlag)
	}
	return cmd
}

// badFlag makes a flag error bad input (exit 2), like every other
// refusal of these commands.
func badFlag(_ *cobra.Command, err error) error { return restore.BadInput(err) }

// selectionFlags are the three ways to name the essential workloads.
type selectionFlags struct {
	policy        string
	workloads     []string
	workloadsFile string
}

func (s *selectionFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.policy, "policy", "", "RecoveryPolicy file: the Deployments, DaemonSets and StatefulSets whose pod template its spec.critical selects are essential; its actions, fencing and limits apply")
	f.StringArrayVar(&s.workloads, "workload", nil, "essential workload as namespace/kind/name, e.g. kube-system/deployment/coredns (kinds: deployment, daemonset, statefulset); repeat the flag for more")
	f.StringVar(&s.workloadsFile, "workloads-file", "", "file listing essential workloads, one namespace/kind/name per line (# starts a comment)")
}

func (s *selectionFlags) given() bool {
	return s.policy != "" || len(s.workloads) > 0 || s.workloadsFile != ""
}

// load reads the selection; every error is bad input.
func (s *selectionFlags) load() (restore.Selection, error) {
	var sel restore.Selection
	if s.policy != "" && (len(s.workloads) > 0 || s.workloadsFile != "") {
		return sel, restore.BadInputf("--policy cannot be combined with --workload or --workloads-file")
	}
	if s.policy != "" {
		data, err := os.ReadFile(s.policy)
		if err != nil {
			return sel, restore.BadInput(fmt.Errorf("--policy: %w", err))
		}
		sel.Policy, err = restore.ParsePolicy(data, s.policy)
		return sel, err
	}
	for _, w := range s.workloads {
		ref, err := restore.ParseWorkloadRef(w)
		if err != nil {
			return sel, restore.BadInput(fmt.Errorf("--workload: %w", err))
		}
		sel.Workloads = append(sel.Workloads, ref)
	}
	if s.workloadsFile != "" {
		data, err := os.ReadFile(s.workloadsFile)
		if err != nil {
			return sel, restore.BadInput(fmt.Errorf("--workloads-file: %w", err))
		}
		refs, err := restore.ParseWorkloadList(data, s.workloadsFile)
		if err != nil {
			return sel, restore.BadInput(err)
		}
		sel.Workloads = append(sel.Workloads, refs...)
	}
	return sel, nil
}

func newRestoreBringupCommand() *cobra.Command {
	var (
		kube       *cli.KubeFlags
		sel        selectionFlags
		base       time.Duration
		perNode    time.Duration
		defaults   rescue.Defaults
		zones      zone.Config
		dryRun     bool
		stopSwitch string
		ignoreSusp bool
		out        outputFlag
	)
	cmd := &cobra.Command{
		Use:   "bringup",
		Short: "Reschedule the essential workloads stranded on dead nodes and wait until their status says available",
		Long: `Run right after the control plane is back on the surviving node(s). It

  * reports the zone state and which essential pods sit on NotReady nodes;
  * reschedules them onto Ready nodes with the controller's safety rules (pkg/rescue):
    stateless pods are deleted so their ReplicaSet replaces them, with a scale to 0
    and back as the fallback; StatefulSet pods and pods with ReadWriteOnce volumes
    only off a node tainted node.kubernetes.io/out-of-service; DaemonSet pods never.
    A restore is an explicit operator action, so it acts at once (maxUnavailableTime 0);
  * waits on each workload's status (Deployment: observedGeneration, updated and
    available replicas, condition Available; DaemonSet: available vs desired on Ready
    nodes; StatefulSet: ready replicas), never on a pod merely existing. A restored
    status may predate the outage, so pods count only on nodes that are Ready AND
    whose Lease (kube-node-lease) is seen renewing during the bring-up;
  * sends replacements only to such live nodes: a node Ready in the restored status
    whose Lease does not renew is no target (progress says which nodes it waits on);
  * reads the zone state as kube-controller-manager computes it: set the zone flags
    to its values, as for rebound controller and rebound diagnose;
  * gives up at a deadline of --timeout-base + --timeout-per-node x nodes.

It honours the controller's stop switch: while the ConfigMap --stop-switch exists it
plans, reports and acts on nothing (exit 4). A --policy whose spec.suspend is true is
refused (exit 4) unless --ignore-suspend. --dry-run and a stopped run first watch the
Leases for up to half a Lease duration, so the plan they print has the real targets.

Deadline defaults: --timeout-base 3m covers kube-controller-manager's
--node-monitor-grace-period (50s by default: until then a dead node still looks
Ready and its pods cannot be told stranded), the --replacement-timeout (60s, the
controller's) before the scale-bounce fallback, and starting the replacements. --timeout-per-node 5s
covers what grows with the cluster: more NotReady nodes and stranded pods, DaemonSet
pods on every node, a restored apiserver and scheduler with more to work through
(the seed's fix scaled its wait by node count the same way): 3m25s for 5 nodes,
7m10s for 50, 11m20s for 100.

Exit codes: 0 every workload available (or --dry-run), 1 other failure,
2 bad input (unknown workload, bad flag or file; nothing changed), 3 deadline passed,
4 refused as unsafe: every workload still missing needs fencing first, or the stop
switch is pulled, or the policy is suspended.`,
		Example: `  rebound restore bringup --workload kube-system/deployment/coredns --workload kube-system/deployment/calico-kube-controllers
  rebound restore bringup --policy deploy/policy/default-recoverypolicy.yaml -o json
  rebound restore bringup --workloads-file essential.txt --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return restore.BadInput(err)
			}
			if !sel.given() {
				return restore.BadInputf("name the essential workloads: --policy FILE, --workload namespace/kind/name or --workloads-file FILE")
			}
			selection, err := sel.load()
			if err != nil {
				return err
			}
			deadline := restore.Deadline{Base: base, PerNode: perNode}
			if err := deadline.Validate(); err != nil {
				return restore.BadInput(err)
			}
			if defaults.ReplacementTimeout <= 0 {
				return restore.BadInputf("--replacement-timeout must be positive, got %s", defaults.ReplacementTimeout)
			}
			if err := zones.Validate(); err != nil {
				return restore.BadInput(err)
			}
			stop, err := parseStopSwitch(stopSwitch)
			if err != nil {
				return restore.BadInput(err)
			}
			cfg, err := kube.RESTConfig("rebound-restore")
			if err != nil {
				return restore.BadInput(err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			reports, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			// People read progress on stdout; with -o json it goes to
			// stderr and stdout carries only the result.
			progress := cmd.OutOrStdout()
			if out.json() {
				progress = cmd.ErrOrStderr()
			}
			res, err := restore.Bringup(cmd.Context(), restore.Options{
				Client:             client,
				Reports:            reports,
				Selection:          selection,
				Deadline:           deadline,
				DryRun:             dryRun,
				ReplacementTimeout: defaults.ReplacementTimeout,
				ZoneConfig:         zones,
				Progress:           progress,
				StopSwitch:         stop,
				IgnoreSuspend:      ignoreSusp,
			})
			if res != nil && out.json() {
				if perr := out.print(cmd.OutOrStdout(), res, nil); perr != nil {
					return perr
				}
			}
			if err != nil {
				return err
			}
			if res.ExitCode != restore.ExitOK {
				// The details are above (or in the JSON); keep this short.
				return &restore.Error{Code: res.ExitCode, Err: fmt.Errorf("restore bringup: %s (exit code %d)", res.Outcome, res.ExitCode)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	kube = cli.AddKubeFlags(cmd, cli.Omit{Namespace: true})
	sel.register(cmd)
	f.DurationVar(&base, "timeout-base", restore.DefaultTimeoutBase, "deadline base (see above)")
	f.DurationVar(&perNode, "timeout-per-node", restore.DefaultTimeoutPerNode, "deadline added per node of the cluster (see above)")
	cli.AddReplacementTimeoutFlag(f, &defaults)
	cli.AddZoneFlags(f, &zones)
	f.BoolVar(&dryRun, "dry-run", false, "read the cluster (until the Ready nodes' Leases are seen renewing, bounded), print the zone state, stranded pods and the actions that would be taken; change nothing")
	f.StringVar(&stopSwitch, "stop-switch", controllercmd.DefaultNamespace+"/"+stopswitch.DefaultName, "the controller's stop switch, NAMESPACE/NAME of a ConfigMap (NAME alone: in "+controllercmd.DefaultNamespace+"): while it exists nothing is changed and the exit code is 4; empty disables the check")
	f.BoolVar(&ignoreSusp, "ignore-suspend", false, "act even though the --policy file has spec.suspend: true (refused otherwise, exit 4)")
	out.register(cmd)
	return cmd
}

// parseStopSwitch reads --stop-switch: NAMESPACE/NAME, or NAME in the
// controller's default namespace; "" is no switch.
func parseStopSwitch(v string) (types.NamespacedName, error) {
	if v == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, found := strings.Cut(v, "/")
	if !found {
		ns, name = controllercmd.DefaultNamespace, v
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--stop-switch %q: want NAMESPACE/NAME or NAME", v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// etcdRestoreResult is what `restore etcd` prints.
type etcdRestoreResult struct {
	Snapshot etcdsnapshot.Info `json:"snapshot"`
	DataDir  string            `json:"dataDir"`
	Name     string            `json:"name"`
	PeerURL  string            `json:"initialAdvertisePeerURL"`
	Metadata *restore.Metadata `json:"backupMetadata,omitempty"`
	Next     []string          `json:"next"`
}

func newRestoreEtcdCommand() *cobra.Command {
	var (
		opts etcdsnapshot.RestoreOptions
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Restore an etcd snapshot into a new data dir, after checking its integrity",
		Long: `Verifies the snapshot (bbolt header, length, SHA-256 trailer, page consistency,
etcd's buckets), then restores it with etcd's own restore (etcdutl) into a temporary
folder next to --data-dir and renames it into place. A corrupt, truncated or foreign
file is refused, and --data-dir must not exist or be empty: nothing is ever
overwritten. Start etcd on the new data dir with the same --name and
--initial-advertise-peer-urls.

Exit codes: 0 restored, 1 other failure, 2 bad snapshot or non-empty target (nothing changed).`,
		Example: `  rebound restore etcd --snapshot backup.db --data-dir /var/lib/etcd-restored --name controller-0 \
    --initial-advertise-peer-urls https://10.0.0.10:2380`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return restore.BadInput(err)
			}
			if opts.Snapshot == "" || opts.DataDir == "" {
				return restore.BadInputf("--snapshot and --data-dir are required")
			}
			info, err := etcdsnapshot.Restore(opts)
			if err != nil {
				if errors.Is(err, etcdsnapshot.ErrCorrupt) || errors.Is(err, etcdsnapshot.ErrNotSnapshot) ||
					errors.Is(err, etcdsnapshot.ErrTargetNotEmpty) || errors.Is(err, os.ErrNotExist) {
					return restore.BadInput(err)
				}
				return err
			}
			res := etcdRestoreResult{Snapshot: info, DataDir: opts.DataDir, Name: opts.Name, PeerURL: opts.PeerURL}
			if m, err := restore.ReadMetadata(opts.Snapshot); err == nil {
				res.Metadata = m
			}
			res.Next = []string{
				fmt.Sprintf("start etcd with --data-dir %s --name %s --initial-advertise-peer-urls %s", opts.DataDir, opts.Name, opts.PeerURL),
				"start the control plane, then: rebound restore bringup --policy FILE (or --workload ...)",
			}
			return out.print(cmd.OutOrStdout(), res, func() string { return etcdRestoreText(res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Snapshot, "snapshot", "", "snapshot file, as written by rebound backup or etcdctl snapshot save (required)")
	f.StringVar(&opts.DataDir, "data-dir", "", "new etcd data dir; must not exist or be empty (required)")
	f.StringVar(&opts.Name, "name", "default", "etcd member name (etcd's --name)")
	f.StringVar(&opts.PeerURL, "initial-advertise-peer-urls", "http://localhost:2380", "the member's peer URL (etcd's --initial-advertise-peer-urls)")
	f.StringVar(&opts.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "etcd's --initial-cluster-token")
	out.register(cmd)
	return cmd
}

func etcdRestoreText(r etcdRestoreResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Snapshot %s verified: %d bytes, SHA-256 %s, etcd revision %d, %d keys.\n",
		r.Snapshot.Path, r.Snapshot.Size, r.Snapshot.SHA256[:16], r.Snapshot.Revision, r.Snapshot.TotalKeys)
	fmt.Fprintf(&b, "Restored into %s (member %s, peer URL %s).\n", r.DataDir, r.Name, r.PeerURL)
	if m := r.Metadata; m != nil {
		fmt.Fprintf(&b, "Backup taken %s with %d nodes: %s.\n", m.TakenAt.Format(time.RFC3339), len(m.Nodes), strings.Join(m.Nodes, ", "))
		for _, w := range m.EssentialWorkloads {
			fmt.Fprintf(&b, "  essential %s ran on %s\n", w.Workload.Display(), strings.Join(w.Nodes, ", "))
		}
	}
	b.WriteString("Next:\n")
	for _, n := range r.Next {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	return b.String()
}
