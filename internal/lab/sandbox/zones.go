package sandbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/pkg/kubestatus"
)

// MaxNodes is the largest sandbox Start accepts. What a machine really
// carries is measured by `rebound-bench scale` (docs/scale.md); 2 cores
// carry about 1,000 nodes with upstream's timings.
const MaxNodes = 5000

// createParallelism is how many creations a large sandbox has in flight.
// The apiserver, not the client, is then what paces the start-up.
const createParallelism = 32

func (o *Options) validateZones() error {
	switch {
	case o.Zones < 0:
		return fmt.Errorf("sandbox: zones must not be negative, got %d", o.Zones)
	case o.Zones > 26:
		return fmt.Errorf("sandbox: at most 26 zones (zone-a … zone-z), got %d", o.Zones)
	case len(o.ZoneSizes) == 0:
		return nil
	case o.Zones != 0 && o.Zones != len(o.ZoneSizes):
		return fmt.Errorf("sandbox: %d zone sizes given for %d zones", len(o.ZoneSizes), o.Zones)
	}
	sum := 0
	for i, n := range o.ZoneSizes {
		if n < 1 {
			return fmt.Errorf("sandbox: zone %s must have at least one node, got %d", zoneName(o.Zone, i), n)
		}
		sum += n
	}
	if sum != o.Nodes {
		return fmt.Errorf("sandbox: zone sizes %v add up to %d nodes, but nodes is %d", o.ZoneSizes, sum, o.Nodes)
	}
	return nil
}

// zoneName is the i-th zone: the configured one first, then zone-b, …
func zoneName(first string, i int) string {
	if i == 0 {
		return first
	}
	return fmt.Sprintf("zone-%c", 'a'+i)
}

// nodeZones returns the zone of every node, in node order: explicit sizes
// first, else the nodes split evenly (the first zones take the rest).
func (o *Options) nodeZones() []string {
	sizes := o.ZoneSizes
	if len(sizes) == 0 {
		n := max(o.Zones, 1)
		sizes = make([]int, n)
		for i := range sizes {
			sizes[i] = o.Nodes / n
			if i < o.Nodes%n {
				sizes[i]++
			}
		}
	}
	out := make([]string, 0, o.Nodes)
	for i, n := range sizes {
		for range n {
			out = append(out, zoneName(o.Zone, i))
		}
	}
	return out
}

// NodeAddress gives node i a distinct loopback address: 127.0.1.1 for
// node-0, as before, and on into 127.0.2.x past 254 nodes.
func NodeAddress(i int) string {
	n := i + 1
	return fmt.Sprintf("127.0.%d.%d", 1+n/256, n%256)
}

func (c *Cluster) createNodes(ctx context.Context, opts Options) error {
	zones := opts.nodeZones()
	c.NodeNames = make([]string, opts.Nodes)
	for i := range c.NodeNames {
		c.NodeNames[i] = NodeName(i)
	}
	cl, err := c.bulkClient()
	if err != nil {
		return err
	}
	err = Parallel(ctx, opts.Nodes, createParallelism, func(ctx context.Context, i int) error {
		name := NodeName(i)
		labels := map[string]string{
			"kubernetes.io/hostname":        name,
			"kubernetes.io/os":              "linux",
			"kubernetes.io/arch":            "amd64",
			"topology.kubernetes.io/region": opts.Region,
			"topology.kubernetes.io/zone":   zones[i],
			"type":                          "kwok",
			HeartbeatLabel:                  heartbeatOn,
		}
		if i == 0 {
			// node-0 plays controller-0 of the seed report: the node that
			// survives. Like an all-in-one controller it is schedulable.
			labels["node-role.kubernetes.io/control-plane"] = ""
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      labels,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			},
			Status: corev1.NodeStatus{
				// Loopback addresses: nothing ever dials a fake node, and if
				// something tried, it would stay on this machine.
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: NodeAddress(i)},
					{Type: corev1.NodeHostName, Address: name},
				},
			},
		}
		if _, err := cl.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("sandbox: create node %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// One list per poll, not one get per node: a thousand nodes come up
	// together.
	timeout := 60*time.Second + time.Duration(opts.Nodes)*50*time.Millisecond
	var notReady []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := cl.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through apiserver hiccups
		}
		ready := map[string]bool{}
		for i := range list.Items {
			ready[list.Items[i].Name] = kubestatus.NodeReady(&list.Items[i]) && !conditionTainted(&list.Items[i])
		}
		notReady = notReady[:0]
		for _, n := range c.NodeNames {
			if !ready[n] {
				notReady = append(notReady, n)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		if len(notReady) > 5 {
			notReady = append(notReady[:5], fmt.Sprintf("and %d more", len(notReady)-5))
		}
		return fmt.Errorf("sandbox: nodes %v not Ready (and free of the not-ready and unreachable taints) within %s: %w (see %s)", notReady, timeout, err, c.LogPath(Kwok))
	}
	return nil
}

// conditionTainted reports whether n still carries a taint that kube-
// controller-manager (or, on a new node, the apiserver's admission) puts
// on a node for its Ready condition: node.kubernetes.io/not-ready or
// unreachable. A node the API has Ready keeps it until the node lifecycle
// controller takes it off, a moment later on a loaded machine, and a
// scenario that places a pod on the node at once would see the scheduler
// put it elsewhere.
func conditionTainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable
	})
}

// bulkClient is an admin client without client-side rate limiting, for
// creating many objects at once; the apiserver's priority and fairness
// paces it.
func (c *Cluster) bulkClient() (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	return kubernetes.NewForConfig(cfg)
}

// Parallel runs fn for 0..n-1 with at most workers at once and returns the
// first error; after an error no new index starts.
func Parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}
