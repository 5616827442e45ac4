package gossip

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// Writer writes this agent's gossip read.
type Writer interface {
	WriteGossip(ctx context.Context, g liveness.GossipReport) error
}

// FieldManager owns the PeeringReport's gossip field. It is not the BGP
// writer's (rebound-agent): with server-side apply each manager owns only
// the fields it applies, so the two writers of one agent never remove or
// overwrite each other's.
const FieldManager = "rebound-agent-gossip"

// APIWriter writes the gossip field of the node's PeeringReport with one
// server-side apply per write and no read (RBAC: create and patch on
// peeringreports, as the BGP writer's).
type APIWriter struct {
	Client dynamic.Interface
	// Node is the reporter: the report's name.
	Node string
}

// WriteGossip applies g.
func (w APIWriter) WriteGossip(ctx context.Context, g liveness.GossipReport) error {
	err := kube.ApplyReport(ctx, w.Client, kube.GossipToAPI(w.Node, g), FieldManager)
	if err != nil {
		return fmt.Errorf("write the gossip read of PeeringReport %s: %w", w.Node, err)
	}
	return nil
}
