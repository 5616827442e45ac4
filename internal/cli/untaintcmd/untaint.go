// Package untaintcmd is `rebound untaint`: take rebound's taint
// rebound.dev/unreachable:NoSchedule off every node, the last step of an
// uninstall (docs/install.md).
package untaintcmd

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/cli"
	"rebound/pkg/exitcode"
	"rebound/pkg/unreachable"
)

// FieldManager names the removal in the nodes' managedFields and the
// audit log.
const FieldManager = "rebound-untaint-cli"

// Result is what one run did, node by node.
type Result struct {
	// Removed are the nodes the taint was taken off; with DryRun, the
	// nodes it would be.
	Removed []string `json:"removed"`
	// Failed maps a node to why its taint could not be taken off.
	Failed map[string]string `json:"failed,omitempty"`
	DryRun bool              `json:"dryRun,omitempty"`
}

// Options say which nodes, and whether to write.
type Options struct {
	// Nodes to look at; empty means every node.
	Nodes  []string
	DryRun bool
}

// Run takes rebound's taint off the nodes that carry it, each through the
// one writer of the taint (unreachable.ChangeTaint: a fresh read, every
// other taint written back as it was, under the node's resourceVersion).
// A node named but missing is a failure; a node without the taint is left
// alone.
func Run(ctx context.Context, cs kubernetes.Interface, opts Options) (Result, error) {
	res := Result{Removed: []string{}, Failed: map[string]string{}, DryRun: opts.DryRun}
	names := slices.Clone(opts.Nodes)
	if len(names) == 0 {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return res, fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			if unreachable.Tainted(&list.Items[i]) != nil {
				names = append(names, list.Items[i].Name)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names {
		if opts.DryRun {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case err != nil:
				res.Failed[name] = err.Error()
			case unreachable.Tainted(n) != nil:
				res.Removed = append(res.Removed, name)
			}
			continue
		}
		w, err := unreachable.ChangeTaint(ctx, cs.CoreV1().Nodes(), name, "", nil, FieldManager)
		switch {
		case err != nil:
			res.Failed[name] = err.Error()
		case w == unreachable.TaintNodeGone && len(opts.Nodes) > 0:
			res.Failed[name] = "no such node"
		case w == unreachable.TaintWritten:
			res.Removed = append(res.Removed, name)
		}
	}
	return res, nil
}

// NewCommand returns `untaint`.
func NewCommand() *cobra.Command {
	var (
		kube   *cli.KubeFlags
		out    cli.Output
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "untaint [NODE...]",
		Short: "Take rebound's taint " + unreachable.TaintKey + " off every node (the last step of an uninstall)",
		Long: `rebound's controller marks a node dead on both planes (its Lease and its gossip
watchers, docs/detection.md) with the taint ` + unreachable.TaintKey + `:NoSchedule
and takes it off once the node is back (Ready, its Lease renewing); a node's own
gossip agent takes it off when no controller does. With rebound uninstalled,
neither runs: this command takes the taint off every node that carries it (or
the nodes named), and nothing else. Every other taint is written back as it
was, under the node's resourceVersion.

Run it after the controller and the agents are gone (docs/install.md,
"Uninstall"): a controller still running may mark a node again.

Exit code 0 when every taint is off, 1 when one could not be taken off, 2 on a
bad flag.`,
		Example: `  rebound untaint              # every node
  rebound untaint --dry-run    # which nodes carry it
  rebound untaint node-3       # one node`,
		RunE: func(cmd *cobra.Command, nodes []string) error {
			if err := out.Validate(); err != nil {
				return exitcode.Usage(err)
			}
			cfg, err := kube.RESTConfig("rebound-untaint")
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			res, err := Run(cmd.Context(), cs, Options{Nodes: nodes, DryRun: dryRun})
			if err != nil {
				return err
			}
			if err := out.Print(cmd.OutOrStdout(), res, func() string { return text(res) }); err != nil {
				return err
			}
			if len(res.Failed) > 0 {
				return &exitcode.Error{Code: exitcode.Failed, Err: fmt.Errorf("%s left on %d node(s)", unreachable.TaintKey, len(res.Failed))}
			}
			return nil
		},
	}
	kube = cli.AddKubeFlags(cmd, cli.Omit{Namespace: true})
	out.Register(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the nodes that carry the taint, change nothing")
	return cmd
}

func text(res Result) string {
	var b strings.Builder
	verb := "removed from"
	if res.DryRun {
		verb = "would be removed from"
	}
	switch len(res.Removed) {
	case 0:
		fmt.Fprintf(&b, "%s: on no node\n", unreachable.TaintKey)
	default:
		fmt.Fprintf(&b, "%s %s %s\n", unreachable.TaintKey, verb, strings.Join(res.Removed, ", "))
	}
	for _, n := range slices.Sorted(maps.Keys(res.Failed)) {
		fmt.Fprintf(&b, "  %s: %s\n", n, res.Failed[n])
	}
	return b.String()
}
