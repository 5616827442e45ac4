package gossip

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestKeyRotationWithoutASplit rotates the key of a running membership
// of three real members through the keyring, as docs/install.md says:
// every key file "old", then "old\nnew", then "new\nold", then "new",
// each member reading its file on its own schedule. No member is ever
// declared dead or left, and no watcher writes anything but Alive.
func TestKeyRotationWithoutASplit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	oldKey, newKey := testKey(t), testKey(t)
	dir := t.TempDir()
	b64 := base64.StdEncoding.EncodeToString
	write := func(name string, keys ...[]byte) {
		t.Helper()
		var b bytes.Buffer
		for _, k := range keys {
			b.WriteString(b64(k) + "\n")
		}
		// As the kubelet updates a Secret volume: a new file renamed in.
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range addrs(0, 60, 3) {
		name := []string{"rot-a", "rot-b", "rot-c"}[i]
		write(name, oldKey)
		cfg := c.config(name, a, nil)
		cfg.Key, cfg.Keys = nil, [][]byte{oldKey}
		cfg.KeyFile, cfg.KeyReloadInterval = filepath.Join(dir, name), 50*time.Millisecond
		var seeds []string
		if i > 0 {
			seeds = []string{c.members[c.names[0]].seed()}
		}
		c.members[name] = c.start(cfg, seeds...)
		c.names = append(c.names, name)
	}
	c.converged(15 * time.Second)
	writesBefore := map[string]int{}
	for _, n := range c.names {
		writesBefore[n] = c.members[n].w.count()
	}

	const skew = 1500 * time.Millisecond
	steps := [][][]byte{{oldKey, newKey}, {newKey, oldKey}, {newKey}}
	for s, keys := range steps {
		for _, n := range c.names {
			write(n, keys...)
			// The kubelets do not sync the Secret on every node at once:
			// longer apart than memberlist needs to declare a member it
			// cannot read dead (about 3 s here), so that a rotation that
			// splits the members is seen to.
			if err := sleepCtx(context.Background(), skew); err != nil {
				t.Fatal(err)
			}
		}
		err := pollUntil(context.Background(), 5*time.Second, func() bool {
			for _, n := range c.names {
				got := c.members[n].Keys()
				if len(got) != len(keys) {
					return false
				}
				for i := range keys {
					if !bytes.Equal(got[i], keys[i]) {
						return false
					}
				}
			}
			return true
		})
		if err != nil {
			t.Fatalf("step %d: the keyrings did not become %v: %v\nlog:\n%s", s+1, keyIDs(keys), err, c.log)
		}
		// A few probe and gossip rounds on the new keyrings, and a full
		// state exchange (TCP, encrypted with the primary).
		if err := sleepCtx(context.Background(), 4*DefaultProbeInterval); err != nil {
			t.Fatal(err)
		}
		if _, err := c.members[c.names[0]].ml.Join([]string{c.members[c.names[1]].seed()}); err != nil {
			t.Fatalf("step %d: a state exchange failed: %v", s+1, err)
		}
	}
	for _, n := range c.names {
		m := c.members[n]
		if d := m.leaves(); d != 0 {
			t.Errorf("%s heard %d departures during the rotation, want none\nlog:\n%s", n, d, c.log)
		}
		if got := m.ml.NumMembers(); got != len(c.names) {
			t.Errorf("%s has %d members, want %d", n, got, len(c.names))
		}
		for _, g := range m.w.since(writesBefore[n]) {
			for _, w := range g.Watches {
				if w.State != liveness.GossipAlive {
					t.Errorf("%s wrote %s %s during the rotation", n, w.Node, w.State)
				}
			}
		}
	}
}

// TestKeyReloadKeepsTheKeyringOnABadFile: a file with a bad line changes
// nothing; fixing it is picked up.
func TestKeyReloadKeepsTheKeyringOnABadFile(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	key, next := testKey(t), testKey(t)
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("garbage line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := c.config("reload-a", addrs(0, 70, 1)[0], key)
	cfg.KeyFile, cfg.KeyReloadInterval = path, 20*time.Millisecond
	m := c.start(cfg)
	err := pollUntil(context.Background(), 5*time.Second, func() bool {
		return bytes.Contains([]byte(c.log.String()), []byte("keyring not reloaded; the keys in use stay"))
	})
	if err != nil {
		t.Fatalf("no error logged for the bad file: %v\nlog:\n%s", err, c.log)
	}
	if got := m.Keys(); len(got) != 1 || !bytes.Equal(got[0], key) {
		t.Fatalf("keyring %v after a bad file, want the key in use", keyIDs(got))
	}
	if !bytes.Contains([]byte(c.log.String()), []byte("line 1: not base64")) {
		t.Errorf("the logged error does not name the line:\n%s", c.log)
	}
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(next)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = pollUntil(context.Background(), 5*time.Second, func() bool {
		got := m.Keys()
		return len(got) == 1 && bytes.Equal(got[0], next)
	})
	if err != nil {
		t.Fatalf("the fixed file was not applied: %v", err)
	}
}
