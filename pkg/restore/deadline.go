package restore

import (
	"fmt"
	"time"
)

// Deadline is the bring-up's time budget: a base plus a term per node, so
// that it grows with the cluster as the seed's fix made its wait grow with
// the node count.
type Deadline struct {
	// Base covers what every restore waits for whatever its size: the node
	// lifecycle controller's --node-monitor-grace-period (50s by default)
	// before a dead node is NotReady (until then its pods look fine), the
	// replacement timeout (60s) after which a stateless rescue falls back to
	// a scale bounce, and starting the replacements.
	Base time.Duration
	// PerNode covers what grows with the cluster: more nodes to go
	// NotReady, more stranded pods to replace, DaemonSet pods to start on
	// every node, and a freshly restored apiserver and scheduler working
	// through more objects.
	PerNode time.Duration
}

// Defaults of Deadline; see the fields. 3m + 5s per node is 3m25s for 5
// nodes, 7m10s for 50, 11m20s for 100.
const (
	DefaultTimeoutBase    = 3 * time.Minute
	DefaultTimeoutPerNode = 5 * time.Second
)

// DefaultDeadline returns the default base and per-node term.
func DefaultDeadline() Deadline {
	return Deadline{Base: DefaultTimeoutBase, PerNode: DefaultTimeoutPerNode}
}

// maxDeadline bounds For, so that a typo cannot make a wait of days.
const maxDeadline = 24 * time.Hour

// For returns the deadline for a cluster of nodes nodes.
func (d Deadline) For(nodes int) time.Duration {
	total := d.Base + time.Duration(max(nodes, 0))*d.PerNode
	if total > maxDeadline || total < d.Base { // overflow
		return maxDeadline
	}
	return total
}

// Validate checks the flags --timeout-base and --timeout-per-node.
func (d Deadline) Validate() error {
	if d.Base <= 0 {
		return fmt.Errorf("--timeout-base must be positive, got %s", d.Base)
	}
	if d.PerNode < 0 {
		return fmt.Errorf("--timeout-per-node must not be negative, got %s", d.PerNode)
	}
	if d.Base > maxDeadline {
		return fmt.Errorf("--timeout-base must be at most %s, got %s", maxDeadline, d.Base)
	}
	return nil
}

// String explains the deadline for nodes, e.g. "3m25s (3m0s + 5s x 5 nodes)".
func (d Deadline) explain(nodes int) string {
	return fmt.Sprintf("%s (base %s + %s x %d nodes)", d.For(nodes), d.Base, d.PerNode, nodes)
}
