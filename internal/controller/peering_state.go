package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/pkg/peering"
)

// Keys of the state ConfigMap.
const (
	// peeringStateKey holds peering.State as JSON: what the planner needs
	// to keep its hysteresis after a controller restart.
	peeringStateKey = "state.json"
	// peeringSetKey lists the set, one node per line, for humans.
	peeringSetKey = "peers"
)

// loadPeeringState reads the planner's state from the ConfigMap. When the
// ConfigMap does not exist (first start, or deleted), it rebuilds the
// membership from the nodes' labels, so that a lost ConfigMap costs the
// flap history but never flips the set.
func loadPeeringState(ctx context.Context, reader client.Reader, key client.ObjectKey, nodes []corev1.Node) (peering.State, error) {
	var cm corev1.ConfigMap
	err := reader.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		st := peering.State{Nodes: map[string]peering.NodeState{}}
		for _, n := range nodes {
			switch n.Labels[peering.LabelInSet] {
			case "true":
				st.Nodes[n.Name] = peering.NodeState{InSet: true}
			case "false":
				st.Nodes[n.Name] = peering.NodeState{InSet: false}
			}
		}
		return st, nil
	}
	if err != nil {
		return peering.State{}, fmt.Errorf("read peering state ConfigMap %s: %w", key, err)
	}
	var st peering.State
	if data := cm.Data[peeringStateKey]; data != "" {
		if err := json.Unmarshal([]byte(data), &st); err != nil {
			return peering.State{}, fmt.Errorf("peering state ConfigMap %s, key %s: %w (delete the key to start afresh from the node labels)", key, peeringStateKey, err)
		}
	}
	if st.Nodes == nil {
		st.Nodes = map[string]peering.NodeState{}
	}
	return st, nil
}

// savePeeringState writes the state and the set, creating the ConfigMap
// when it is missing. It reads through reader (uncached: one ConfigMap is
// not worth a cluster-wide ConfigMap informer) and writes through c.
func savePeeringState(ctx context.Context, reader client.Reader, c client.Client, key client.ObjectKey, st peering.State, peers []string) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	want := map[string]string{peeringStateKey: string(data), peeringSetKey: strings.Join(peers, "\n")}
	var cm corev1.ConfigMap
	err = reader.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound"}},
			Data:       want,
		}
		if err := c.Create(ctx, &cm); err != nil {
			return fmt.Errorf("create peering state ConfigMap %s (does namespace %s exist?): %w", key, key.Namespace, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read peering state ConfigMap %s: %w", key, err)
	}
	cm.Data = want
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("update peering state ConfigMap %s: %w", key, err)
	}
	return nil
}

// plannerState is the state the next plan starts from: loaded from the
// state ConfigMap at the first pass (nodes are the pass's read, for the
// labels a lost ConfigMap is rebuilt from), then the last one saved.
func (r *PeeringReconciler) plannerState(ctx context.Context, log logr.Logger, nodes []corev1.Node) (peering.State, error) {
	if r.state != nil {
		return *r.state, nil
	}
	st, err := loadPeeringState(ctx, r.reader, r.opts.State, nodes)
	if err != nil {
		return peering.State{}, err
	}
	r.state = &st
	data, _ := json.Marshal(st)
	r.savedJSON = string(data)
	log.Info("peering state loaded", "configMap", r.opts.State.String(), "nodes", len(st.Nodes))
	return st, nil
}

// saveState records the plan's state in the ConfigMap when it differs
// from what the ConfigMap holds, and makes it the next plan's start. On
// error the next pass plans again from the old state.
func (r *PeeringReconciler) saveState(ctx context.Context, res peering.Result) error {
	if data, _ := json.Marshal(res.State); string(data) != r.savedJSON {
		if err := savePeeringState(ctx, r.reader, r.client, r.opts.State, res.State, res.PeerNames()); err != nil {
			return err
		}
		r.savedJSON = string(data)
	}
	st := res.State
	r.state = &st
	return nil
}
