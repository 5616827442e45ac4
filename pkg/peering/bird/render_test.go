package bird_test

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current templates")

// goldenCase renders one configuration. Golden files are
// testdata/<TestName>_<name>.golden; every one is also checked by the real
// BIRD parser of its version (TestGoldenFilesParseWithBIRD).
type goldenCase struct {
	name    string
	version bird.Version
	render  func(bird.Version) ([]byte, error)
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// calicoMesh is a node of a Calico cluster: the local node appears in the
// peer set (it is skipped), addresses that sort differently as text and as
// numbers (Calico's passive rule compares text), a peer with its own AS,
// port and restart time, and Calico's filters.
func calicoMesh(v bird.Version) bird.MeshConfig {
	return bird.MeshConfig{
		Version:  v,
		NodeName: "node-a",
		Address:  addr("10.0.0.9"),
		AS:       64512,
		Peers: []bird.Peer{
			{Name: "node-c", Address: addr("10.0.0.10")},
			{Name: "node-a", Address: addr("10.0.0.9")},
			{Name: "node-b", Address: addr("10.0.0.1"), GracefulRestartTime: 300},
			{Name: "tor-1", Address: addr("10.0.0.254"), AS: 65000, Port: 1790},
			{Name: "node-d", Address: addr("10.0.0.11"), Port: 179},
			{Name: "node-e", Address: addr("10.0.0.90")}, // "10.0.0.90" > "10.0.0.9": passive
		},
		GracefulRestartTime: 90,
		GracefulRestartWait: 30,
		ImportFilter:        "calico_import_from_bgp_peers",
		ExportFilter:        "calico_export_to_bgp_peers",
	}
}

var goldenCases = func() []goldenCase {
	var cases []goldenCase
	for _, v := range []bird.Version{bird.Bird16, bird.Bird2} {
		tag := "bird" + strings.ReplaceAll(string(v), ".", "")
		cases = append(cases,
			goldenCase{name: tag + "_calico_mesh", version: v, render: func(v bird.Version) ([]byte, error) {
				return bird.RenderMesh(calicoMesh(v))
			}},
			goldenCase{name: tag + "_calico_mesh_bfd", version: v, render: func(v bird.Version) ([]byte, error) {
				c := calicoMesh(v)
				c.BFD = &bird.BFD{}
				return bird.RenderMesh(c)
			}},
			goldenCase{name: tag + "_listen_port_bfd", version: v, render: func(v bird.Version) ([]byte, error) {
				c := calicoMesh(v)
				c.ListenPort = 1790
				c.BFD = &bird.BFD{Interval: 100 * time.Millisecond, Multiplier: 5}
				return bird.RenderMesh(c)
			}},
			goldenCase{name: tag + "_alone_defaults", version: v, render: func(v bird.Version) ([]byte, error) {
				return bird.RenderMesh(bird.MeshConfig{Version: v, NodeName: "node-a", Address: addr("10.0.0.9"), AS: 64512})
			}},
		)
	}
	return cases
}()

func goldenPath(name string) string {
	return filepath.Join("testdata", "TestRender_"+name+".golden")
}

func TestRender(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.render(tc.version)
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
				t.Fatalf("%v (run `go test ./pkg/peering/bird -run TestRender -update` to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered config differs from %s (rerun with -update if the change is intended):\n%s", path, got)
			}
			again, _ := tc.render(tc.version)
			if !bytes.Equal(got, again) {
				t.Errorf("rendering twice gave different bytes")
			}
		})
	}
}

// includeWrapper is the smallest main configuration around a mesh include:
// it defines what a Calico configuration would (router id, the filters).
const includeWrapper = `router id 192.0.2.1;
filter calico_import_from_bgp_peers { accept; }
filter calico_export_to_bgp_peers { accept; }
protocol device { }
include "%s";
`

// TestGoldenFilesParseWithBIRD feeds every golden file to the real
// daemon's parser, `bird -p -c FILE`, of its version: the golden files are
// known-good BIRD configuration, not only stable text.
func TestGoldenFilesParseWithBIRD(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			bins := birdtest.Require(t, tc.version)
			path, err := filepath.Abs(goldenPath(tc.name))
			if err != nil {
				t.Fatal(err)
			}
			main := filepath.Join(t.TempDir(), "bird.conf")
			if err := os.WriteFile(main, fmt.Appendf(nil, includeWrapper, path), 0o644); err != nil {
				t.Fatal(err)
			}
			path = main
			if err := bins.Parse(path); err != nil {
				t.Fatalf("%s rejects %s: %v", bins.Banner, goldenPath(tc.name), err)
			}
		})
	}
}

// TestParserRejectsBrokenConfig proves the parse check has teeth: the same
// daemon refuses a configuration with a statement where it does not belong.
func TestParserRejectsBrokenConfig(t *testing.T) {
	for _, v := range []bird.Version{bird.Bird16, bird.Bird2} {
		t.Run(string(v), func(t *testing.T) {
			bins := birdtest.Require(t, v)
			path := filepath.Join(t.TempDir(), "bird.conf")
			// graceful restart wait is global; inside a protocol it is a
			// syntax error in both versions.
			broken := "router id 192.0.2.1;\nprotocol bgp p { local as 1; neighbor 192.0.2.2 as 1; graceful restart wait 3; }\n"
			if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := bins.Parse(path); err == nil {
				t.Fatalf("%s accepted a per-protocol `graceful restart wait`", bins.Banner)
			}
		})
	}
}

func TestRenderRejectsInvalidConfig(t *testing.T) {
	base := calicoMesh(bird.Bird16)
	tests := []struct {
		name   string
		change func(*bird.MeshConfig)
		field  string // the error must name it
	}{
		{"version", func(c *bird.MeshConfig) { c.Version = "3" }, "version"},
		{"node name with a newline", func(c *bird.MeshConfig) { c.NodeName = "a\nprotocol x {}" }, "nodeName"},
		{"peer name with a quote", func(c *bird.MeshConfig) { c.Peers[0].Name = `b"; export all; "` }, "peers[0].name"},
		{"peer name with a brace", func(c *bird.MeshConfig) { c.Peers[1].Name = "b}" }, "peers[1].name"},
		{"peer name with a semicolon", func(c *bird.MeshConfig) { c.Peers[2].Name = "b;c" }, "peers[2].name"},
		{"peer name with a carriage return", func(c *bird.MeshConfig) { c.Peers[2].Name = "b\rc" }, "peers[2].name"},
		{"empty peer name", func(c *bird.MeshConfig) { c.Peers[0].Name = "" }, "peers[0].name"},
		{"missing local address", func(c *bird.MeshConfig) { c.Address = netip.Addr{} }, "address"},
		{"IPv6 peer", func(c *bird.MeshConfig) { c.Peers[0].Address = addr("fd00::1") }, "peers[0].address"},
		{"IPv4-mapped peer", func(c *bird.MeshConfig) { c.Peers[0].Address = addr("::ffff:10.0.0.5") }, "peers[0].address"},
		{"AS 0", func(c *bird.MeshConfig) { c.AS = 0 }, "as"},
		{"restart time over 12 bits", func(c *bird.MeshConfig) { c.GracefulRestartTime = 4096 }, "gracefulRestartTime"},
		{"peer restart time negative", func(c *bird.MeshConfig) { c.Peers[0].GracefulRestartTime = -1 }, "peers[0].gracefulRestartTime"},
		{"restart wait negative", func(c *bird.MeshConfig) { c.GracefulRestartWait = -5 }, "gracefulRestartWait"},
		{"restart wait too long", func(c *bird.MeshConfig) { c.GracefulRestartWait = 70000 }, "gracefulRestartWait"},
		{"filter with a space", func(c *bird.MeshConfig) { c.ExportFilter = "all; import none" }, "exportFilter"},
		{"BFD interval too short", func(c *bird.MeshConfig) { c.BFD = &bird.BFD{Interval: time.Millisecond} }, "bfd.interval"},
		{"BFD interval not in milliseconds", func(c *bird.MeshConfig) { c.BFD = &bird.BFD{Interval: 1500 * time.Microsecond} }, "bfd.interval"},
		{"BFD multiplier too large", func(c *bird.MeshConfig) { c.BFD = &bird.BFD{Multiplier: 256} }, "bfd.multiplier"},
		{"duplicate peer address", func(c *bird.MeshConfig) { c.Peers[1].Address = c.Peers[0].Address; c.Peers[1].Name = "other" }, "peers[1].address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Peers = append([]bird.Peer(nil), base.Peers...)
			tc.change(&c)
			out, err := bird.RenderMesh(c)
			if err == nil {
				t.Fatalf("rendered invalid config:\n%s", out)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error does not name field %s: %v", tc.field, err)
			}
		})
	}
}
