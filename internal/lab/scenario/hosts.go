package scenario

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/internal/lab/hoststandin"
	"rebound/internal/lab/sandbox"
)

// StartHosts opens a stand-in for each of nodes (sandbox node names) at
// its InternalIP and writes its port into the Node's
// status.daemonEndpoints.kubeletEndpoint.Port, where the gossip members
// read it. kwok's stages never write daemonEndpoints, so the port stays.
func StartHosts(ctx context.Context, c *sandbox.Cluster, nodes []string) (map[string]*hoststandin.Host, error) {
	hosts := map[string]*hoststandin.Host{}
	closeAll := func() {
		for _, h := range hosts {
			h.Close()
		}
	}
	for _, n := range nodes {
		i := nodeIndex(c, n)
		if i < 0 {
			closeAll()
			return nil, fmt.Errorf("hosts: no node %q in the sandbox (nodes are %v)", n, c.NodeNames)
		}
		h, err := hoststandin.Listen(n, sandbox.NodeAddress(i))
		if err != nil {
			closeAll()
			return nil, err
		}
		hosts[n] = h
		patch := fmt.Appendf(nil, `{"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":%d}}}}`, h.Port)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			closeAll()
			return nil, fmt.Errorf("hosts: write %s's kubelet port: %w", n, err)
		}
	}
	return hosts, nil
}

func nodeIndex(c *sandbox.Cluster, node string) int {
	for i, n := range c.NodeNames {
		if n == node {
			return i
		}
	}
	return -1
}
