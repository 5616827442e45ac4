package gossip_test

import (
	"bytes"
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rebound/internal/agent"
	"rebound/internal/agent/gossip"
)

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentGossipOptions: the agent's gossip flags, as `rebound agent`
// validates them before it connects anywhere; each bad one is named.
func TestAgentGossipOptions(t *testing.T) {
	key32 := bytes.Repeat([]byte{0xa5}, 32)
	good := writeFile(t, []byte(base64.StdEncoding.EncodeToString(key32)+"\n"))
	short := writeFile(t, []byte(base64.StdEncoding.EncodeToString(key32[:13])))
	missing := filepath.Join(t.TempDir(), "no-such-key")
	only := func(o agent.Options) agent.Options {
		o.NodeName, o.GossipOnly = "node-a", true
		return o
	}
	gossipOn := func(o agent.Options) agent.Options {
		if o.Gossip.KeyFile == "" {
			o.Gossip.KeyFile = good
		}
		if o.Gossip.Join == nil {
			o.Gossip.Join = []string{"rebound-agent-gossip.rebound-system.svc:7946"}
		}
		return only(o)
	}
	with := func(change func(*agent.Options)) agent.Options {
		o := gossipOn(agent.Options{})
		change(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		opts agent.Options
		want string // "" means valid
	}{
		{"gossip only, no BIRD flag", gossipOn(agent.Options{}), ""},
		{"gossip only, several seeds, bare hosts", gossipOn(agent.Options{Gossip: agent.GossipOptions{Join: []string{"10.0.0.1", "10.0.0.2:7946", "fd00::3"}}}), ""},
		{"gossip only without a key", only(agent.Options{}), "--gossip-only needs --gossip-key-file"},
		{"missing key file", gossipOn(agent.Options{Gossip: agent.GossipOptions{KeyFile: missing}}), "--gossip-key-file " + missing + ": no such file"},
		{"bad key length", gossipOn(agent.Options{Gossip: agent.GossipOptions{KeyFile: short}}), "16, 24 or 32 bytes"},
		{"no seeds", gossipOn(agent.Options{Gossip: agent.GossipOptions{Join: []string{}}}), "--gossip-join: required"},
		{"bad seed port", gossipOn(agent.Options{Gossip: agent.GossipOptions{Join: []string{"10.0.0.1:99999"}}}), `--gossip-join "10.0.0.1:99999"`},
		{"one watcher", gossipOn(agent.Options{Gossip: agent.GossipOptions{Watchers: 1}}), "--gossip-watchers 1"},
		{"too many watchers", gossipOn(agent.Options{Gossip: agent.GossipOptions{Watchers: 8}}), "--gossip-watchers 8"},
		{"bad port", gossipOn(agent.Options{Gossip: agent.GossipOptions{Port: 70000}}), "--gossip-port 70000"},
		{"unspecified bind address", gossipOn(agent.Options{Gossip: agent.GossipOptions{BindAddress: netip.IPv4Unspecified()}}), "--gossip-bind-address 0.0.0.0"},
		{"negative probe interval", gossipOn(agent.Options{Gossip: agent.GossipOptions{ProbeInterval: -1}}), "--gossip-probe-interval"},
		{"gossip with --once", with(func(o *agent.Options) { o.GossipOnly, o.Once = false, true }), "--gossip-key-file with --once"},
		{"gossip with --rejoin-only", with(func(o *agent.Options) { o.GossipOnly, o.RejoinOnly = false, true }), "--gossip-key-file with --rejoin-only"},
		{"seeds without a key", agent.Options{NodeName: "node-a", RejoinOnly: true, Gossip: agent.GossipOptions{Join: []string{"10.0.0.1"}}}, "--gossip-join and --gossip-bind-address need --gossip-key-file"},
		{"gossip beside BIRD still checks BIRD", with(func(o *agent.Options) { o.GossipOnly = false }), "--bird-socket"},
		{"gossip only without a node name", with(func(o *agent.Options) { o.NodeName = "" }), "--node-name"},
		{"a keyring of two keys", gossipOn(agent.Options{Gossip: agent.GossipOptions{KeyFile: writeFile(t, []byte(base64.StdEncoding.EncodeToString(key32)+"\n"+base64.StdEncoding.EncodeToString(key32[:16])+"\n"))}}), ""},
		{"a bad second line", gossipOn(agent.Options{Gossip: agent.GossipOptions{KeyFile: writeFile(t, []byte(base64.StdEncoding.EncodeToString(key32)+"\n???\n"))}}), "line 2: not base64"},
		{"negative key reload interval", gossipOn(agent.Options{Gossip: agent.GossipOptions{KeyReloadInterval: -time.Second}}), "--gossip-key-reload-interval -1s"},
		{"bad gossip service", gossipOn(agent.Options{Gossip: agent.GossipOptions{Service: "Rebound_Gossip"}}), `--gossip-service "Rebound_Gossip"`},
		{"bad gossip namespace", gossipOn(agent.Options{Gossip: agent.GossipOptions{Namespace: "a/b"}}), `--gossip-namespace "a/b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.WithDefaults().ValidateFlags()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v does not name %q", err, tc.want)
			}
		})
	}
}

// TestLoadKeys: a keyring file, one base64 key a line, the primary first;
// a bad line is named with its number and the fix.
func TestLoadKeys(t *testing.T) {
	k1, k2, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16), bytes.Repeat([]byte{3}, 24)
	b64 := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		name string
		data string
		want [][]byte
		err  string
	}{
		{"one key", b64(k1) + "\n", [][]byte{k1}, ""},
		{"rotation step: old and new", b64(k1) + "\n" + b64(k2) + "\n", [][]byte{k1, k2}, ""},
		{"three keys, blank lines, CRLF and a repeat", "\n" + b64(k3) + "\r\n\n" + b64(k1) + "\n" + b64(k3) + "\n", [][]byte{k3, k1}, ""},
		{"a line that is not base64", b64(k1) + "\nnot-a-key!\n", nil, "line 2: not base64"},
		{"a key of a wrong length", b64(k1) + "\n" + b64(k1[:20]) + "\n", nil, "line 2: the key is 20 bytes"},
		{"only blank lines", "\n\n", nil, "no key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, []byte(tc.data))
			got, err := gossip.LoadKeys(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--gossip-key-file "+path) || !strings.Contains(err.Error(), "openssl rand -base64 32") {
					t.Fatalf("error %v: want one naming --gossip-key-file %s, %q and the fix", err, path, tc.err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("LoadKeys = %x, %v; want %x", got, err, tc.want)
			}
			for i := range got {
				if !bytes.Equal(got[i], tc.want[i]) {
					t.Fatalf("key %d = %x, want %x", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestLoadKey(t *testing.T) {
	raw16 := []byte("0123456789abcdef")
	// 24 random-looking bytes that are not base64 of a key length.
	raw24 := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 0xff}
	key32 := bytes.Repeat([]byte{7}, 32)
	for _, tc := range []struct {
		name string
		data []byte
		want []byte
		err  string
	}{
		{"base64 with a newline", []byte(base64.StdEncoding.EncodeToString(key32) + "\n"), key32, ""},
		{"raw 16 bytes", raw16, raw16, ""},
		{"raw 24 bytes", raw24, raw24, ""},
		{"empty", nil, nil, "holds 0 bytes and no key"},
		{"base64 of 13 bytes", []byte(base64.StdEncoding.EncodeToString(key32[:13])), nil, "line 1: the key is 13 bytes: want an AES key of 16, 24 or 32 bytes: make one with openssl rand -base64 32"},
		{"a keyring: the primary first", []byte(base64.StdEncoding.EncodeToString(key32) + "\n" + base64.StdEncoding.EncodeToString(raw16) + "\n"), key32, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gossip.LoadKey(writeFile(t, tc.data))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--gossip-key-file") {
					t.Fatalf("error %v: want one naming --gossip-key-file and %q", err, tc.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("LoadKey = %x, %v; want %x", got, err, tc.want)
			}
		})
	}
}
