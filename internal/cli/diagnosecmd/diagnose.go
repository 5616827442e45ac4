// Package diagnosecmd is the `diagnose` command, shared by rebound
// (`rebound diagnose`) and the kubectl plugin (`kubectl rebound
// diagnose`). pkg/diagnose is the library it runs.
package diagnosecmd

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"rebound/internal/cli"
	"rebound/pkg/diagnose"
)

// NewCommand returns the diagnose command, shared by `rebound diagnose`
// and the kubectl plugin `kubectl rebound diagnose`. Every error it
// returns carries its exit code (pkg/exitcode): diagnose.ExitBlocking or
// diagnose.diagnose.ExitCannotRead.
func NewCommand() *cobra.Command {
	var (
		opts   diagnose.Options
		kube   *cli.KubeFlags
		output cli.Output
	)
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
    first reason (a pod on a NotReady node, an unschedulable pod, a crash loop);
  * who deleted each Terminating pod, by rebound's own Events and
    status.lastActions, or by kube-controller-manager's taint and the pod's
    toleration;
  * early detection: each Ready node that could not be found dead on both
    planes (Lease and gossip) if it died now, and why.

It only gets and lists nodes, pods, namespaces, PVCs, ReplicaSets, Deployments,
StatefulSets, DaemonSets, RecoveryPolicies, PeeringReports, the nodes' Leases
and Events: the ClusterRole rebound-diagnose (deploy/rbac) is all it needs. Without the RecoveryPolicy CRD it assumes the
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
				return &diagnose.Error{Code: diagnose.ExitCannotRead, Msg: fmt.Sprintf("diagnose takes no arguments, got %q (see --help)", args)}
			}
			return nil
		},
		// The caller prints the error (one line) and exits with its code;
		// usage after a failed API call would only bury that line.
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(output.Validate(), cli.ValidateDetection(opts.Peering.Evidence)); err != nil {
				return &diagnose.Error{Code: diagnose.ExitCannotRead, Msg: err.Error(), Err: err}
			}
			cfg, err := kube.RESTConfig("rebound-diagnose")
			if err != nil {
				return diagnose.CannotRead(err)
			}
			opts.Config = cfg
			r, code, err := diagnose.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch output.Format {
			case "json":
				err = diagnose.WriteJSON(w, r)
			case "yaml":
				err = output.Print(w, r, nil)
			default:
				err = diagnose.WriteText(w, r)
			}
			if err != nil {
				return &diagnose.Error{Code: diagnose.ExitCannotRead, Msg: "write the report: " + err.Error(), Err: err}
			}
			if code != diagnose.ExitOK {
				return &diagnose.Error{Code: code, Msg: r.Summary}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &diagnose.Error{Code: diagnose.ExitCannotRead, Msg: err.Error() + " (see --help)", Err: err}
	})
	f := cmd.Flags()
	kube = cli.AddKubeFlags(cmd, cli.Omit{Namespace: true})
	output.Register(cmd)
	f.DurationVar(&opts.Timeout, "timeout", diagnose.DefaultTimeout, "give up on a request to the API server after this long")
	cli.AddZoneFlags(f, &opts.ZoneConfig)
	cli.AddReplacementTimeoutFlag(f, &opts.Defaults)
	cli.AddPeeringFlags(f, &opts.Peering)
	cli.AddDetectionFlags(f, &opts.Peering.Evidence)
	return cmd
}
