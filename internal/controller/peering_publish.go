package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
	"rebound/pkg/peering/kube"
)

// peerSetPublisher writes one concern of a plan to the cluster: the
// document the agents watch, the node labels, the Calico BGPPeer. Each is
// level-triggered: it compares what the cluster holds with what the plan
// wants and writes only the difference, so a pass that changes nothing
// writes nothing, and a publisher that failed converges on the next pass.
type peerSetPublisher interface {
	// Name says which concern an error came from.
	Name() string
	Publish(ctx context.Context, out peeringOutcome) error
}

// peeringOutcome is what the publishers read: the plan and the pass's
// read of the nodes (the cache's objects, read-only), at the time of the
// pass.
type peeringOutcome struct {
	Result peering.Result
	Nodes  []corev1.Node
	Now    time.Time
	// Calico is the Calico BGPPeer's API group chosen for this pass; nil
	// without the Calico backend.
	Calico *calicoGroup
}

// calicoGroup is the group the Calico BGPPeer goes to, or why there is
// none (Err).
type calicoGroup struct {
	Choice calico.APIGroupChoice
	Err    error
}

// group is the chosen group/version, "" when none could be chosen.
func (g *calicoGroup) group() string {
	if g.Err != nil {
		return ""
	}
	return g.Choice.APIGroup()
}

// reason says why, or what went wrong.
func (g *calicoGroup) reason() string {
	if g.Err != nil {
		return g.Err.Error()
	}
	return g.Choice.Reason
}

// annotations are what the peer-set document says about it: the
// group and the reason, for `rebound diagnose` and people. Without the
// Calico backend (g nil) both are removed.
func (g *calicoGroup) annotate(ann map[string]string) map[string]string {
	if g == nil {
		delete(ann, calico.AnnotationAPIGroup)
		delete(ann, calico.AnnotationAPIGroupReason)
		return ann
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[calico.AnnotationAPIGroup] = g.group()
	ann[calico.AnnotationAPIGroupReason] = g.reason()
	return ann
}

// publisherAfter is a publisher that must not run in a pass where
// another one failed: After names it.
type publisherAfter interface {
	After() string
}

// publishAll runs every publisher in order. A failure does not stop the
// publishers that do not depend on the failed one; every error is
// returned, joined, each prefixed by the publisher's name.
func publishAll(ctx context.Context, pubs []peerSetPublisher, out peeringOutcome) error {
	var errs []error
	failed := map[string]bool{}
	for _, p := range pubs {
		if a, ok := p.(publisherAfter); ok && failed[a.After()] {
			failed[p.Name()] = true
			errs = append(errs, fmt.Errorf("%s: not published, because the %s was not", p.Name(), a.After()))
			continue
		}
		if err := p.Publish(ctx, out); err != nil {
			failed[p.Name()] = true
			errs = append(errs, fmt.Errorf("%s: %w", p.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// publishers are the reconciler's publishers for this pass, built from its
// current clients and options; none in a dry run. The document goes
// first: agents read it, and the labels wait for it.
func (r *PeeringReconciler) publishers() []peerSetPublisher {
	if r.opts.DryRun {
		return nil
	}
	pubs := []peerSetPublisher{
		peerSetDocument{client: r.client, reader: r.reader, key: r.opts.PeerSet},
		nodeLabels{client: r.client, recorder: r.recorder},
	}
	if r.opts.Calico != nil {
		pubs = append(pubs, calicoBGPPeer{client: r.client, reader: r.reader, opts: *r.opts.Calico})
	}
	return pubs
}

// peerSetDocument publishes the set as the one document agents watch
// (ConfigMap rebound-system/rebound-peer-set by default).
type peerSetDocument struct {
	client client.Client
	reader client.Reader // uncached: agents watch the ConfigMap, the controller writes it once per change
	key    types.NamespacedName
}

const peerSetDocumentName = "peer-set document"

func (peerSetDocument) Name() string { return peerSetDocumentName }

// Publish writes the document when its content differs from what is
// published; the generation grows by one with every write.
func (p peerSetDocument) Publish(ctx context.Context, out peeringOutcome) error {
	log := ctrl.LoggerFrom(ctx)
	res := out.Result
	var cm corev1.ConfigMap
	err := p.reader.Get(ctx, p.key, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read the published peer set ConfigMap %s: %w", p.key, err)
	}
	exists := err == nil
	gen := int64(1)
	if exists {
		if old, perr := kube.PeerSetFromConfigMap(&cm); perr == nil {
			if old.SameContent(res.PeerSet(old.Generation, old.PublishedAt)) {
				return p.annotate(ctx, &cm, out.Calico)
			}
			gen = old.Generation + 1
		} else {
			log.Info("published peer set unreadable, replacing it", "configMap", p.key.String(), "error", perr.Error())
		}
	}
	doc := res.PeerSet(gen, out.Now)
	if err := doc.Validate(); err != nil {
		// Plan never produces this; refuse rather than publish garbage.
		return fmt.Errorf("refusing to publish an invalid peer set: %w", err)
	}
	if !exists {
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: p.key.Name, Namespace: p.key.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound"},
				Annotations: out.Calico.annotate(nil)},
			Data: map[string]string{peering.PeerSetKey: doc.Encode()},
		}
		if err := p.client.Create(ctx, &cm); err != nil {
			return fmt.Errorf("create the published peer set ConfigMap %s (does namespace %s exist?): %w", p.key, p.key.Namespace, err)
		}
	} else {
		cm.Data = map[string]string{peering.PeerSetKey: doc.Encode()}
		cm.Annotations = out.Calico.annotate(cm.Annotations)
		if err := p.client.Update(ctx, &cm); err != nil {
			return fmt.Errorf("update the published peer set ConfigMap %s: %w", p.key, err)
		}
	}
	log.Info("peer set published", "generation", gen, "members", len(doc.Peers), "floor", doc.Floor, "frozen", doc.Frozen)
	return nil
}

// annotate writes the Calico annotations of a document whose set has
// not changed, when they differ from what it says.
func (p peerSetDocument) annotate(ctx context.Context, cm *corev1.ConfigMap, g *calicoGroup) error {
	before := maps.Clone(cm.Annotations)
	after := g.annotate(maps.Clone(cm.Annotations))
	if maps.Equal(before, after) {
		return nil
	}
	cm.Annotations = after
	if err := p.client.Update(ctx, cm); err != nil {
		return fmt.Errorf("update the published peer set ConfigMap %s (Calico API group): %w", p.key, err)
	}
	return nil
}

// nodeLabels sets peering.rebound.dev/in-set to "true" or "false" on every
// planned node whose label differs, with an Event for each change.
type nodeLabels struct {
	client   client.Client
	recorder events.EventRecorder
}

func (nodeLabels) Name() string { return "node labels" }

// After: agents read the document; labels it does not match would only
// tell Calico and humans something the agents do not do.
func (nodeLabels) After() string { return peerSetDocumentName }

func (p nodeLabels) Publish(ctx context.Context, out peeringOutcome) error {
	log := ctrl.LoggerFrom(ctx)
	decisions := make(map[string]peering.Decision, len(out.Result.Decisions))
	for _, d := range out.Result.Decisions {
		decisions[d.Name] = d
	}
	var errs []error
	for i := range out.Nodes {
		n := &out.Nodes[i]
		d, planned := decisions[n.Name]
		if !planned {
			continue
		}
		want := "false"
		if d.InSet {
			want = "true"
		}
		if n.Labels[peering.LabelInSet] == want {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, peering.LabelInSet, want)
		// A fresh object: the response is decoded into it, and n shares
		// its maps with the cache.
		target := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
		if err := p.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("label node %s %s=%s: %w", n.Name, peering.LabelInSet, want, err))
			}
			continue
		}
		reason, note := "PeerSetRemoved", "left out of the BGP peer set: "+d.Message
		if d.InSet {
			reason, note = "PeerSetAdded", "in the BGP peer set: "+d.Message
		}
		typ := corev1.EventTypeNormal
		if !d.InSet {
			typ = corev1.EventTypeWarning
		}
		p.recorder.Eventf(n, nil, typ, reason, "PublishPeerSet", "%s", note)
		log.Info("peer set published", "node", n.Name, peering.LabelInSet, want, "reason", d.Reason)
	}
	return errors.Join(errs...)
}

// calicoBGPPeer makes sure the BGPPeer that meshes the set exists with the
// wanted spec, in the API group of the pass's choice (the one
// calico-node reads). A copy left in the other group by an earlier
// choice is left alone: calico-node does not read it, and it is
// overwritten if that group is chosen again. It never touches the BGPConfiguration: switching Calico's
// own node-to-node mesh off is the operator's step of the migration.
type calicoBGPPeer struct {
	client client.Client
	reader client.Reader // uncached: one object is not worth an informer
	opts   calico.PeerOptions
}

func (calicoBGPPeer) Name() string { return "Calico BGPPeer" }

func (p calicoBGPPeer) Publish(ctx context.Context, out peeringOutcome) error {
	log := ctrl.LoggerFrom(ctx)
	if out.Calico == nil {
		return errors.New("calico backend: no API group chosen")
	}
	if out.Calico.Err != nil {
		if errors.Is(out.Calico.Err, calico.ErrDiscovery) {
			return out.Calico.Err // the API server's hiccup: retried
		}
		// A setting or an install to fix: the next node change retries.
		return reconcile.TerminalError(out.Calico.Err)
	}
	gvk := out.Calico.Choice.GVK
	want := calico.BGPPeerAs(gvk, p.opts)
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	err := p.reader.Get(ctx, client.ObjectKey{Name: want.GetName()}, got)
	switch {
	case meta.IsNoMatchError(err):
		return reconcile.TerminalError(fmt.Errorf("calico backend: the API server serves %s but not its BGPPeer kind: install Calico's bgppeers CRD or drop the Calico option: %w", gvk.GroupVersion(), err))
	case apierrors.IsNotFound(err):
		if err := p.client.Create(ctx, want); err != nil {
			return fmt.Errorf("calico backend: create BGPPeer %s: %w", want.GetName(), err)
		}
		log.Info("Calico BGPPeer created", "name", want.GetName(), "apiVersion", gvk.GroupVersion().String(), "selector", calico.InSetSelector)
		return nil
	case err != nil:
		return fmt.Errorf("calico backend: read BGPPeer %s: %w", want.GetName(), err)
	}
	if calico.SpecEqual(got, want) {
		return nil
	}
	spec, _, _ := unstructured.NestedMap(want.Object, "spec")
	if err := unstructured.SetNestedMap(got.Object, spec, "spec"); err != nil {
		return err
	}
	if err := p.client.Update(ctx, got); err != nil {
		return fmt.Errorf("calico backend: update BGPPeer %s: %w", want.GetName(), err)
	}
	log.Info("Calico BGPPeer updated", "name", want.GetName(), "apiVersion", gvk.GroupVersion().String())
	return nil
}
