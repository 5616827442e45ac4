package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
)

// removalRecorder records, from watches, when each of some nodes first
// left a published peer set: its name dropped out of the document, or
// its peering.rebound.dev/in-set label turned false, whichever the API
// showed first. S10 and S11 count removals with it; the times are this
// machine's clock when the watch delivered the change, which is never
// earlier than the controller's decision.
type removalRecorder struct {
	mu   sync.Mutex
	left map[string]time.Time
	how  map[string]string
	err  error
}

// recordRemovals starts recording removals of nodes from set until ctx
// ends. Every node must be in the set and labelled in when it is called.
func recordRemovals(ctx context.Context, c *sandbox.Cluster, set types.NamespacedName, nodes []string) (*removalRecorder, error) {
	r := &removalRecorder{left: map[string]time.Time{}, how: map[string]string{}}
	watched := map[string]bool{}
	for _, n := range nodes {
		watched[n] = true
	}
	cm, err := c.Client.CoreV1().ConfigMaps(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the published set %s: %w", set, err)
	}
	members, err := setMembers(cm)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if !members[n] {
			return nil, fmt.Errorf("recording removals from %s: %s is not in it to begin with", set, n)
		}
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, n := range list.Items {
		if watched[n.Name] && n.Labels[peering.LabelInSet] != "true" {
			return nil, fmt.Errorf("recording removals: %s is labelled %s=%q, not true, to begin with", n.Name, peering.LabelInSet, n.Labels[peering.LabelInSet])
		}
	}
	cms, err := c.Client.CoreV1().ConfigMaps(set.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", set.Name).String(),
		ResourceVersion: cm.ResourceVersion,
	})
	if err != nil {
		return nil, err
	}
	nw, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cms.Stop()
		return nil, err
	}
	go func() {
		defer cms.Stop()
		defer nw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-cms.ResultChan():
				if !ok {
					r.fail(fmt.Errorf("the watch of %s ended early", set))
					return
				}
				cm, isCM := ev.Object.(*corev1.ConfigMap)
				if !isCM || ev.Type == watch.Bookmark {
					continue
				}
				now := time.Now()
				m, err := setMembers(cm)
				if err != nil {
					r.fail(err)
					continue
				}
				for _, n := range nodes {
					if !m[n] {
						r.note(n, now, "left the published set")
					}
				}
			case ev, ok := <-nw.ResultChan():
				if !ok {
					r.fail(fmt.Errorf("the watch of nodes ended early"))
					return
				}
				n, isNode := ev.Object.(*corev1.Node)
				if !isNode || !watched[n.Name] {
					continue
				}
				if v := n.Labels[peering.LabelInSet]; v != "true" {
					r.note(n.Name, time.Now(), fmt.Sprintf("labelled %s=%q", peering.LabelInSet, v))
				}
			}
		}
	}()
	return r, nil
}

func setMembers(cm *corev1.ConfigMap) (map[string]bool, error) {
	s, err := peering.ParsePeerSet(cm.Data[peering.PeerSetKey])
	if err != nil {
		return nil, fmt.Errorf("published set %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	out := make(map[string]bool, len(s.Peers))
	for _, p := range s.Peers {
		out[p.Name] = true
	}
	return out, nil
}

func (r *removalRecorder) note(node string, at time.Time, how string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.left[node]; !seen {
		r.left[node], r.how[node] = at, how
	}
}

func (r *removalRecorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// removals returns when each node that left did so, and how, or the
// first error of the watches (a recording with a gap counts nothing).
func (r *removalRecorder) removals() (map[string]time.Time, map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := make(map[string]time.Time, len(r.left))
	how := make(map[string]string, len(r.how))
	for n, t := range r.left {
		at[n], how[n] = t, r.how[n]
	}
	return at, how, r.err
}
