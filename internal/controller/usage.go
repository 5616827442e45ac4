package controller

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"rebound/pkg/rescue"
)

// usageIndex keeps, per node, what the pods bound to it request
// (rescue.NodeUsage), up to date from the pod informer's events. During an
// incident every pass may look for a node that can run a replacement, and
// summing the requests of 20,000 pods on every pass cost 80 ms and a copy
// of every cached pod (rebound-bench scale at 1,000 nodes); reading 1,000
// sums costs neither. What one pod counts for is rescue.PodUsage, the rule
// the planner applies when it sums pods itself.
//
// It also keeps a pointer to each counted pod (the cached object, never
// written): the target check reads the Ready nodes' pods for host ports
// and inter-pod (anti-)affinity (pkg/rescue target.go). A pointer per pod
// is all it costs, and handing them to a pass copies no pod.
type usageIndex struct {
	mu     sync.Mutex
	byPod  map[types.UID]countedPod
	byNode map[string]rescue.NodeUsage
	reg    toolscache.ResourceEventHandlerRegistration
}

// countedPod is what a pod was last counted with.
type countedPod struct {
	node     string
	requests corev1.ResourceList
	pod      *corev1.Pod
}

// informer is the part of a controller-runtime informer the index uses.
type informer interface {
	AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
}

func newUsageIndex(inf informer) (*usageIndex, error) {
	u := &usageIndex{byPod: map[types.UID]countedPod{}, byNode: map[string]rescue.NodeUsage{}}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { u.set(obj) },
		UpdateFunc: func(_, obj any) { u.set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				u.mu.Lock()
				u.uncount(p.UID)
				u.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("usage index: %w", err)
	}
	u.reg = reg
	return u, nil
}

// synced tells whether the index has seen every pod of the informer's
// first list; before, the planner must read the pods.
func (u *usageIndex) synced() bool { return u.reg == nil || u.reg.HasSynced() }

// set counts a pod anew: its previous count is taken back first.
func (u *usageIndex) set(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.uncount(p.UID)
	node, req, ok := rescue.PodUsage(p)
	if !ok {
		return
	}
	n := u.byNode[node]
	n.Add(req)
	u.byNode[node] = n
	u.byPod[p.UID] = countedPod{node: node, requests: req, pod: p}
}

// uncount takes back what a pod was counted with; u.mu is held.
func (u *usageIndex) uncount(uid types.UID) {
	c, ok := u.byPod[uid]
	if !ok {
		return
	}
	delete(u.byPod, uid)
	n := u.byNode[c.node]
	n.Remove(c.requests)
	if n.Pods <= 0 {
		delete(u.byNode, c.node)
		return
	}
	u.byNode[c.node] = n
}

// forNodes copies the usage of the given nodes, for one snapshot.
func (u *usageIndex) forNodes(nodes []*corev1.Node) map[string]rescue.NodeUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.forNodesLocked(nodes)
}

// forNodesWithPods is forNodes, and the counted pods bound to the nodes
// for which podsOn is true, read at the same moment so that the sums and
// the pods agree.
func (u *usageIndex) forNodesWithPods(nodes []*corev1.Node, podsOn func(node string) bool) (map[string]rescue.NodeUsage, []*corev1.Pod) {
	u.mu.Lock()
	defer u.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(u.byPod))
	for _, c := range u.byPod {
		if podsOn(c.node) {
			pods = append(pods, c.pod)
		}
	}
	return u.forNodesLocked(nodes), pods
}

func (u *usageIndex) forNodesLocked(nodes []*corev1.Node) map[string]rescue.NodeUsage {
	out := make(map[string]rescue.NodeUsage, len(nodes))
	for _, n := range nodes {
		c, ok := u.byNode[n.Name]
		if !ok {
			continue
		}
		req := make(corev1.ResourceList, len(c.Requested))
		for name, q := range c.Requested {
			req[name] = q.DeepCopy()
		}
		out[n.Name] = rescue.NodeUsage{Requested: req, Pods: c.Pods}
	}
	return out
}
