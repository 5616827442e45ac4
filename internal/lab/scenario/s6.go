package scenario

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// S6 is a node that flaps: stopped for Flap, running for Flap, for
// Duration. What it measures, from an informer on the Nodes: how often
// each node's peer-set membership (the label peering.rebound.dev/in-set)
// changed, and how often the flapping node went NotReady. The caller runs
// rebound's peering controller and agents and checks the counts against
// the flap damping's promise.

// S6Options tune S6.
type S6Options struct {
	Node           string
	Flap, Duration time.Duration
	// Settled, if set, runs after the flapping, with the recording still
	// on: a hook that waits until the caller's components caught up (the
	// node Ready and in the set, agents applied it).
	Settled func(ctx context.Context) error
}

// S6Result is what S6 recorded.
type S6Result struct {
	// Window is from the first stop to the end of Settled.
	Window time.Duration `json:"window"`
	// Changes are, per node, the label values its membership changed to.
	Changes map[string][]string `json:"changes"`
	// NotReadySpells count, per node, its Ready to NotReady transitions.
	NotReadySpells map[string]int `json:"notReadySpells"`
}

// RunS6 plays S6 on a running sandbox.
func RunS6(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S6Options) (S6Result, error) {
	rec := &s6Recorder{changes: map[string][]string{}, notReady: map[string]int{}}
	factory := informers.NewSharedInformerFactory(c.Client, 0)
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: rec.update}); err != nil {
		return S6Result{}, err
	}
	stop := make(chan struct{})
	defer func() { close(stop); factory.Shutdown() }()
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	tl.Step("flap %s: %s stopped, %s running, for %s", opts.Node, opts.Flap, opts.Flap, opts.Duration)
	start := time.Now()
	for time.Since(start) < opts.Duration {
		if err := c.StopNode(ctx, opts.Node); err != nil {
			return S6Result{}, err
		}
		if err := pause(ctx, opts.Flap); err != nil {
			return S6Result{}, err
		}
		if err := c.StartNode(ctx, opts.Node); err != nil {
			return S6Result{}, err
		}
		if err := pause(ctx, opts.Flap); err != nil {
			return S6Result{}, err
		}
	}
	if err := c.WaitNodeReady(ctx, opts.Node, true, time.Minute); err != nil {
		return S6Result{}, err
	}
	if opts.Settled != nil {
		if err := opts.Settled(ctx); err != nil {
			return S6Result{}, err
		}
	}
	res := S6Result{Window: time.Since(start)}
	rec.mu.Lock()
	res.Changes, res.NotReadySpells = maps.Clone(rec.changes), maps.Clone(rec.notReady)
	rec.mu.Unlock()
	tl.Step("%s went NotReady %d times in %s; its membership changed %d times", opts.Node, res.NotReadySpells[opts.Node], res.Window.Round(time.Second), len(res.Changes[opts.Node]))
	return res, nil
}

// pause waits d: the scenario's own rhythm, not a wait for a condition.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// s6Recorder counts membership changes and NotReady spells per node.
type s6Recorder struct {
	mu       sync.Mutex
	changes  map[string][]string
	notReady map[string]int
}

func (r *s6Recorder) update(oldObj, newObj any) {
	o, n := oldObj.(*corev1.Node), newObj.(*corev1.Node)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ov, nv := o.Labels[peering.LabelInSet], n.Labels[peering.LabelInSet]; ov != nv {
		r.changes[n.Name] = append(r.changes[n.Name], nv)
	}
	if kubestatus.NodeReady(o) && !kubestatus.NodeReady(n) {
		r.notReady[n.Name]++
	}
}
