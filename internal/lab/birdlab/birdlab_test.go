package birdlab_test

import (
	"context"
	"os"
	"testing"
	"time"

	"rebound/internal/lab/birdlab"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

// TestLabMeshAndKernelTable: a three-node lab converges, every node learns
// the others' /26, and the kernel node programs them into its namespace's
// table.
func TestLabMeshAndKernelTable(t *testing.T) {
	for i, v := range []bird.Version{bird.Bird16, bird.Bird2} {
		t.Run(string(v), func(t *testing.T) {
			bins := birdtest.Require(t, v)
			dir, err := os.MkdirTemp("", "lab")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			opts := birdlab.Options{Bins: bins, Nodes: 3, Net: 40 + i, Dir: dir, GracefulRestartTime: 10, Include: true}
			if os.Geteuid() == 0 {
				opts.NetNS = "rebound-labtest-" + string(rune('a'+i))
				opts.KernelNode = 1
			}
			lab, err := birdlab.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := lab.Close(); err != nil {
					t.Error(err)
				}
			})
			ctx := context.Background()
			if err := lab.StartAll(ctx); err != nil {
				t.Fatal(err)
			}
			a, b, c := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
			err = birdlab.Poll(ctx, 200*time.Millisecond, time.Minute, "routes everywhere", func() (bool, string) {
				for _, obs := range lab.Nodes {
					for _, n := range lab.Nodes {
						if n == obs {
							continue
						}
						ok, err := birdlab.HasRoute(ctx, obs, n.Route)
						if err != nil || !ok {
							return false, obs.Name + " lacks " + n.Route.String()
						}
					}
				}
				return true, ""
			})
			if err != nil {
				t.Fatal(err)
			}
			if opts.NetNS == "" {
				t.Log("not root: no network namespace, kernel table not checked")
				return
			}
			err = birdlab.Poll(ctx, 200*time.Millisecond, time.Minute, "kernel routes of node-1", func() (bool, string) {
				okA, _ := lab.KernelHasRoute(a.Route)
				okC, _ := lab.KernelHasRoute(c.Route)
				out, _ := lab.KernelRoutes()
				return okA && okC, out
			})
			if err != nil {
				t.Fatal(err)
			}
			if ok, _ := lab.KernelHasRoute(b.Route); ok {
				t.Errorf("kernel table has the node's own route %s", b.Route)
			}
			out, _ := lab.KernelRoutes()
			t.Logf("%s kernel table:\n%s", b.Name, out)
		})
	}
}
