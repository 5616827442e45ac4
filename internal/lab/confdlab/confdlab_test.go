package confdlab

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rebound/internal/lab/birdproc"
)

func TestRewriteTOML(t *testing.T) {
	opts := Options{Dir: "/lab/c0", Socket: "/lab/n0.ctl", Bins: birdproc.Binaries{Bird: "/usr/sbin/bird", Birdc: "/usr/sbin/birdc"}}
	for _, row := range []struct {
		name, in string
		want     []string
		wantErr  bool
	}{
		{
			name: "bird.toml: dest, check and reload replaced, keys kept",
			in:   "[template]\nsrc = \"bird.cfg.template\"\ndest = \"/etc/calico/confd/config/bird.cfg\"\nkeys = [\n    \"/bgp/v1/host\",\n]\ncheck_cmd = \"bird -p -c {{.src}}\"\nreload_cmd = \"sv hup bird || true\"",
			want: []string{`dest = "/lab/c0/bird.cfg"`, `check_cmd = "/usr/sbin/bird -p -c {{.src}}"`, `reload_cmd = "/usr/sbin/birdc -s /lab/n0.ctl configure"`, `"/bgp/v1/host",`, `src = "bird.cfg.template"`},
		},
		{
			name: "bird_aggr.toml: no check_cmd, none added",
			in:   "[template]\ndest = \"/etc/calico/confd/config/bird_aggr.cfg\"\nreload_cmd = \"sv hup bird || true\"",
			want: []string{`dest = "/lab/c0/bird.cfg"`, `reload_cmd = "/usr/sbin/birdc -s /lab/n0.ctl configure"`},
		},
		{name: "no dest: refused, not silently rendered to calico-node's path", in: "[template]\nreload_cmd = \"x\"", wantErr: true},
		{name: "no reload_cmd: refused", in: "[template]\ndest = \"x\"", wantErr: true},
	} {
		t.Run(row.name, func(t *testing.T) {
			got, err := rewriteTOML(row.in, opts, "bird.cfg")
			if (err != nil) != row.wantErr {
				t.Fatalf("err = %v, want error %v", err, row.wantErr)
			}
			for _, w := range row.want {
				if !strings.Contains(got, w) {
					t.Errorf("no %q in\n%s", w, got)
				}
			}
			if strings.Contains(got, "sv hup") || strings.Contains(got, "/etc/calico") {
				t.Errorf("calico-node's paths or commands left in\n%s", got)
			}
		})
	}
}

func TestPrepareIncludesByAbsolutePath(t *testing.T) {
	src := t.TempDir()
	tdir := filepath.Join(src, TemplatesDir)
	for _, name := range templates {
		must(t, os.MkdirAll(filepath.Join(tdir, "templates"), 0o755))
		must(t, os.MkdirAll(filepath.Join(tdir, "conf.d"), 0o755))
		must(t, os.WriteFile(filepath.Join(tdir, "templates", name+".cfg.template"), []byte("include \"bird_aggr.cfg\";\ninclude \"bird_ipam.cfg\";\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(tdir, "conf.d", name+".toml"), []byte("[template]\ndest = \"/etc/x\"\nreload_cmd = \"sv hup bird\"\n"), 0o644))
	}
	dir := t.TempDir()
	c, err := Prepare(Options{Binary: "confd", Source: src, Dir: dir, Kubeconfig: "k", NodeName: "node-0", Socket: "/s"})
	must(t, err)
	if c.Config != filepath.Join(dir, "bird.cfg") {
		t.Errorf("Config = %s", c.Config)
	}
	got, err := os.ReadFile(filepath.Join(dir, "confd", "templates", "bird.cfg.template"))
	must(t, err)
	for _, f := range []string{"bird_aggr.cfg", "bird_ipam.cfg"} {
		if !strings.Contains(string(got), `include "`+filepath.Join(dir, f)+`";`) {
			t.Errorf("bird.cfg.template does not include %s by absolute path:\n%s", f, got)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "confd", "status", "endpoint-status")); err != nil {
		t.Errorf("no endpoint-status folder: %v", err)
	}
	if _, err := Prepare(Options{Source: src, Dir: dir}); err == nil {
		t.Error("Prepare without a binary, node name or socket succeeded")
	}
}

func TestNeighbours(t *testing.T) {
	cfg := "protocol bgp Mesh_127_5_0_3 from bgp_template {\n  neighbor 127.5.0.3 as 64512;\n  source address 127.5.0.2;\n}\n" +
		"protocol bgp Node_127_5_0_4 from bgp_template {\n  ttl security off;\n  neighbor 127.5.0.4 port 1790 as 64512;\n}\n# neighbor 10.0.0.1 is a comment\n"
	got := Neighbours(cfg)
	want := []netip.Addr{netip.MustParseAddr("127.5.0.3"), netip.MustParseAddr("127.5.0.4")}
	if !slices.Equal(got, want) {
		t.Errorf("Neighbours = %v, want %v", got, want)
	}
	if names := ProtocolNames(netip.MustParseAddr("127.5.0.3")); !slices.Contains(names, "Mesh_127_5_0_3") || !slices.Contains(names, "Node_127_5_0_3") {
		t.Errorf("ProtocolNames = %v", names)
	}
}

// TestHostnameHash holds the label value to Calico's: SHA3-256, base32
// without padding (the value below is Python's hashlib.sha3_256 and
// base64.b32encode of "node-1", padding stripped).
func TestHostnameHash(t *testing.T) {
	if got, want := hostnameHash("node-1"), "A3XPYDATRKB7Q4SM2O5FN4RXIHBFIL2PITFX26BAIP5XAB2X74CA"; got != want {
		t.Errorf("hostnameHash(node-1) = %s, want %s", got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
