package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/cli"
	"rebound/pkg/etcdsnapshot"
	"rebound/pkg/restore"
)

func newBackupCommand() *cobra.Command {
	var (
		etcd    etcdsnapshot.ClientOptions
		outFile string
		prefix  string
		kube    *cli.KubeFlags
		sel     selectionFlags
		timeout time.Duration
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Take an etcd snapshot through etcd's API, with a metadata file for the restore",
		Long: `Streams a snapshot from one etcd member (etcd's snapshot API, as etcdctl snapshot
save does), verifies it (bbolt header, length, SHA-256 trailer, page consistency) and
only then saves it as --out; an existing file is never overwritten. Next to it,
FILE.meta.json records the time, the etcd revision, the nodes (read from etcd) and,
with --kubeconfig, the essential workloads and the nodes their pods ran on: the
ones on nodes that will be down during a restore are what 'rebound restore bringup'
has to move. Without --policy/--workload/--workloads-file the essential workloads
are those of the default policy (kube-system, system-cluster-critical or
system-node-critical).

Exit codes: 0 saved, 1 other failure (etcd unreachable...), 2 bad input (nothing written).`,
		Example: `  rebound backup --etcd-endpoint https://127.0.0.1:2379 --cacert ca.crt --cert client.crt --key client.key \
    --out /backup/platform-$(date +%F).db --kubeconfig /etc/kubernetes/admin.conf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return restore.BadInput(err)
			}
			if etcd.Endpoint == "" || outFile == "" {
				return restore.BadInputf("--etcd-endpoint and --out are required")
			}
			// Only an explicit cluster flag makes the backup read the
			// API: on a control-plane host the etcd snapshot alone is
			// what matters, and a stray ~/.kube/config must not fail it.
			useAPI := cmd.Flags().Changed("kubeconfig") || cmd.Flags().Changed("context") || cmd.Flags().Changed("server")
			if sel.given() && !useAPI {
				return restore.BadInputf("--policy, --workload and --workloads-file need --kubeconfig to look the workloads up")
			}
			selection, err := sel.load()
			if err != nil {
				return err
			}
			opts := restore.BackupOptions{Etcd: etcd, Out: outFile, EtcdPrefix: prefix, Selection: selection}
			if useAPI {
				cfg, err := kube.RESTConfig("rebound-backup")
				if err != nil {
					return restore.BadInput(err)
				}
				if opts.Client, err = kubernetes.NewForConfig(cfg); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			m, err := restore.Backup(ctx, opts)
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), m, func() string { return backupText(outFile, m) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&etcd.Endpoint, "etcd-endpoint", "", "client URL of ONE etcd member, e.g. https://127.0.0.1:2379 (required)")
	f.StringVar(&etcd.CACert, "cacert", "", "CA bundle to verify etcd's certificate (etcdctl's --cacert)")
	f.StringVar(&etcd.Cert, "cert", "", "client certificate for etcd (etcdctl's --cert)")
	f.StringVar(&etcd.Key, "key", "", "client key for etcd (etcdctl's --key)")
	f.DurationVar(&etcd.DialTimeout, "dial-timeout", 10*time.Second, "time to connect to etcd")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "time the whole backup may take")
	f.StringVar(&outFile, "out", "", "snapshot file to write; must not exist (required). Metadata goes to FILE"+restore.MetadataSuffix)
	f.StringVar(&prefix, "etcd-prefix", "/registry", "kube-apiserver's --etcd-prefix, to find the nodes in etcd")
	kube = cli.AddKubeFlags(cmd, cli.Omit{Namespace: true})
	f.Lookup("kubeconfig").Usage = "kubeconfig to record the essential workloads (optional: without --kubeconfig, --context or --server the backup reads only etcd)"
	sel.register(cmd)
	out.register(cmd)
	cmd.SetFlagErrorFunc(badFlag)
	return cmd
}

func backupText(path string, m *restore.Metadata) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Saved %s: %d bytes, SHA-256 %s, etcd %s revision %d, %d keys.\n", path, m.SizeBytes, m.SHA256[:16], m.EtcdVersion, m.Revision, m.TotalKeys)
	fmt.Fprintf(&b, "Nodes (%d): %s\n", len(m.Nodes), strings.Join(m.Nodes, ", "))
	for _, w := range m.EssentialWorkloads {
		fmt.Fprintf(&b, "  essential %s: %s, pods on %s\n", w.Workload.Display(), w.State, strings.Join(w.Nodes, ", "))
	}
	if m.EssentialWorkloadsNote != "" {
		fmt.Fprintf(&b, "Essential workloads: %s\n", m.EssentialWorkloadsNote)
	}
	fmt.Fprintf(&b, "Metadata: %s%s\n", path, restore.MetadataSuffix)
	return b.String()
}
