package birdlab_test

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rebound/internal/lab/birdlab"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current templates")

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// loopbackNode is one of three test instances on 127.0.0.x.
func loopbackNode(v bird.Version, kernel *birdlab.KernelConfig) birdlab.StandaloneConfig {
	return birdlab.StandaloneConfig{
		Mesh: bird.MeshConfig{
			Version:    v,
			NodeName:   "node-2",
			Address:    addr("127.0.0.2"),
			AS:         64512,
			ListenPort: 41792,
			Peers: []bird.Peer{
				{Name: "node-2", Address: addr("127.0.0.2"), Port: 41792},
				{Name: "node-3", Address: addr("127.0.0.3"), Port: 41793},
				{Name: "node-4", Address: addr("127.0.0.4"), Port: 41794},
			},
			GracefulRestartWait: 60,
		},
		Routes: []netip.Prefix{netip.MustParsePrefix("10.65.2.0/26")},
		Kernel: kernel,
	}
}

type standaloneCase struct {
	name     string
	version  bird.Version
	includes bool // includes /etc/rebound/mesh.conf
	config   birdlab.StandaloneConfig
}

func standaloneCases() []standaloneCase {
	var cases []standaloneCase
	for _, v := range []bird.Version{bird.Bird16, bird.Bird2} {
		tag := "bird" + strings.ReplaceAll(string(v), ".", "")
		include := loopbackNode(v, &birdlab.KernelConfig{Export: true})
		include.MeshInclude = "/etc/rebound/mesh.conf"
		cases = append(cases,
			standaloneCase{name: tag + "_standalone_loopback", version: v, config: loopbackNode(v, nil)},
			standaloneCase{name: tag + "_standalone_kernel", version: v, config: loopbackNode(v, &birdlab.KernelConfig{Export: true})},
			standaloneCase{name: tag + "_standalone_include", version: v, includes: true, config: include},
		)
	}
	return cases
}

func goldenPath(name string) string {
	return filepath.Join("testdata", "TestRenderStandalone_"+name+".golden")
}

// TestRenderStandalone compares each lab configuration with its golden
// file, then feeds it to the real `bird -p` of its version.
func TestRenderStandalone(t *testing.T) {
	for _, tc := range standaloneCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := birdlab.RenderStandalone(tc.config)
			if err != nil {
				t.Fatal(err)
			}
			path := goldenPath(tc.name)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run `go test ./internal/lab/birdlab -run TestRenderStandalone -update` to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered config differs from %s (rerun with -update if the change is intended):\n%s", path, got)
			}
			bins := birdtest.Require(t, tc.version)
			dir := t.TempDir()
			if tc.includes {
				// Point the include at a real mesh file of the same node.
				mesh, err := bird.RenderMesh(loopbackNode(tc.version, nil).Mesh)
				if err != nil {
					t.Fatal(err)
				}
				meshPath := filepath.Join(dir, "mesh.conf")
				if err := os.WriteFile(meshPath, mesh, 0o644); err != nil {
					t.Fatal(err)
				}
				got = bytes.ReplaceAll(got, []byte("/etc/rebound/mesh.conf"), []byte(meshPath))
			}
			main := filepath.Join(dir, "bird.conf")
			if err := os.WriteFile(main, got, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := bins.Parse(main); err != nil {
				t.Fatalf("%s rejects %s: %v", bins.Banner, path, err)
			}
		})
	}
}

func TestRenderStandaloneRejectsInvalidConfig(t *testing.T) {
	tests := []struct {
		name   string
		change func(*birdlab.StandaloneConfig)
		field  string
	}{
		{"no listen port", func(c *birdlab.StandaloneConfig) { c.Mesh.ListenPort = 0 }, "mesh.listenPort"},
		{"own filters", func(c *birdlab.StandaloneConfig) { c.Mesh.ExportFilter = "mine" }, "mesh.importFilter/exportFilter"},
		{"route with host bits", func(c *birdlab.StandaloneConfig) { c.Routes[0] = netip.MustParsePrefix("10.65.2.1/26") }, "routes[0]"},
		{"IPv6 route", func(c *birdlab.StandaloneConfig) { c.Routes[0] = netip.MustParsePrefix("fd00::/64") }, "routes[0]"},
		{"IPv6 router id", func(c *birdlab.StandaloneConfig) { c.RouterID = addr("fd00::1") }, "routerID"},
		{"bad mesh field", func(c *birdlab.StandaloneConfig) { c.Mesh.NodeName = "x{" }, "nodeName"},
		{"relative include", func(c *birdlab.StandaloneConfig) { c.MeshInclude = "mesh.conf" }, "meshInclude"},
		{"include with a quote", func(c *birdlab.StandaloneConfig) { c.MeshInclude = `/a"; protocol x {` }, "meshInclude"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := loopbackNode(bird.Bird2, nil)
			c.Routes = append([]netip.Prefix(nil), c.Routes...)
			tc.change(&c)
			if _, err := birdlab.RenderStandalone(c); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %v does not name field %s", err, tc.field)
			}
		})
	}
}
