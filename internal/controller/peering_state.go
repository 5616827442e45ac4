package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
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

// publishPeerSet writes the set as the one document agents watch, when
// its content differs from what is published; the generation grows by one
// with every write. It reads the current document uncached (agents watch
// it; the controller writes it once per change of the set).
func (r *PeeringReconciler) publishPeerSet(ctx context.Context, log logr.Logger, res peering.Result, now time.Time) error {
	key := r.opts.PeerSet
	var cm corev1.ConfigMap
	err := r.reader.Get(ctx, key, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read the published peer set ConfigMap %s: %w", key, err)
	}
	exists := err == nil
	gen := int64(1)
	if exists {
		if old, perr := kube.PeerSetFromConfigMap(&cm); perr == nil {
			if old.SameContent(res.PeerSet(old.Generation, old.PublishedAt)) {
				return nil
			}
			gen = old.Generation + 1
		} else {
			log.Info("published peer set unreadable, replacing it", "configMap", key.String(), "error", perr.Error())
		}
	}
	doc := res.PeerSet(gen, now)
	if err := doc.Validate(); err != nil {
		// Plan never produces this; refuse rather than publish garbage.
		return fmt.Errorf("refusing to publish an invalid peer set: %w", err)
	}
	if !exists {
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound"}},
			Data:       map[string]string{peering.PeerSetKey: doc.Encode()},
		}
		if err := r.client.Create(ctx, &cm); err != nil {
			return fmt.Errorf("create the published peer set ConfigMap %s (does namespace %s exist?): %w", key, key.Namespace, err)
		}
	} else {
		cm.Data = map[string]string{peering.PeerSetKey: doc.Encode()}
		if err := r.client.Update(ctx, &cm); err != nil {
			return fmt.Errorf("update the published peer set ConfigMap %s: %w", key, err)
		}
	}
	log.Info("peer set published", "generation", gen, "members", len(doc.Peers), "floor", doc.Floor, "frozen", doc.Frozen)
	return nil
}
