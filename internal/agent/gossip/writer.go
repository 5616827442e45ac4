package gossip

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rebound/api/v1alpha1"
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
	data, err := json.Marshal(kube.GossipToAPI(w.Node, g))
	if err != nil {
		return err
	}
	force := true
	_, err = w.Client.Resource(v1alpha1.PeeringReports).Patch(ctx, w.Node, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("write the gossip read of PeeringReport %s: %w", w.Node, err)
	}
	return nil
}
