package etcdsnapshot

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// The tests run a real etcd member in-process (the same server module the
// sandbox's etcd is built from), take a real snapshot through its API and
// then damage copies of it.

func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u, _ := url.Parse("http://" + l.Addr().String())
	return *u
}

// startEtcd runs a one-member etcd on dataDir until the test ends.
func startEtcd(t testing.TB, dataDir, name string, peer url.URL) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dataDir
	client := freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = name + "=" + peer.String()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready within 60s")
	}
	return client.String()
}

var fixture struct {
	path     string
	endpoint string
}

// snapshotFixture takes one snapshot of an etcd holding a few keys and
// returns a private copy of it for the test to damage.
func snapshotFixture(t testing.TB) string {
	t.Helper()
	if fixture.path == "" {
		dir, err := os.MkdirTemp("", "etcdsnapshot-test-")
		if err != nil {
			t.Fatal(err)
		}
		endpoint := startEtcd(t, filepath.Join(dir, "data"), "sandbox", freeURL(t))
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, k := range []string{"/registry/minions/node-0", "/registry/minions/node-1", "/registry/pods/kube-system/coredns"} {
			if _, err := cli.Put(ctx, k, "value of "+k); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, "backup.db")
		res, err := Save(ctx, ClientOptions{Endpoint: endpoint}, path)
		if err != nil {
			t.Fatalf("Save: %v", err)
		}
		if res.Revision < 4 || res.TotalKeys != 3 || res.EtcdVersion == "" {
			t.Errorf("Save result = %+v, want revision >= 4, 3 keys and a version", res)
		}
		nodes, err := ListKeys(ctx, ClientOptions{Endpoint: endpoint}, "/registry/minions/")
		if err != nil || strings.Join(nodes, ",") != "/registry/minions/node-0,/registry/minions/node-1" {
			t.Errorf("ListKeys = %v, %v", nodes, err)
		}
		// A second save to the same name is refused.
		if _, err := Save(ctx, ClientOptions{Endpoint: endpoint}, path); err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Errorf("Save over an existing file: err = %v, want a refusal", err)
		}
		fixture.path, fixture.endpoint = path, endpoint
	}
	data, err := os.ReadFile(fixture.path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "snapshot.db")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return cp
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.path != "" {
		os.RemoveAll(filepath.Dir(fixture.path))
	}
	os.Exit(code)
}

func TestSaveVerifyRestoreRoundTrip(t *testing.T) {
	snap := snapshotFixture(t)
	info, err := Verify(snap)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(info.SHA256) != 64 || info.TotalKeys != 3 {
		t.Errorf("Verify = %+v", info)
	}

	target := filepath.Join(t.TempDir(), "restored")
	peer := freeURL(t)
	if _, err := Restore(RestoreOptions{Snapshot: snap, DataDir: target, Name: "sandbox", PeerURL: peer.String()}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	assertNoTemp(t, filepath.Dir(target))
	// The restored data dir starts and serves the keys.
	endpoint := startEtcd(t, target, "sandbox", peer)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/registry/pods/kube-system/coredns")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "value of /registry/pods/kube-system/coredns" {
		t.Fatalf("restored etcd: get = %v, %v", resp, err)
	}
	if resp.Header.Revision < info.Revision {
		t.Errorf("restored revision %d < snapshot revision %d", resp.Header.Revision, info.Revision)
	}
}

func TestVerifyAndRestoreRefuseBadSnapshots(t *testing.T) {
	good := snapshotFixture(t)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0xff
	// Cut at a size that still looks like it has a trailer, so the length
	// check in the header is what catches it.
	cut := int64(len(data)/2/512*512 + 32)
	foreign := foreignBolt(t, dir)

	cases := []struct {
		name    string
		path    string
		want    error
		message string
	}{
		{"truncated", write("truncated.db", data[:len(data)/2]), ErrCorrupt, "cut short"},
		{"truncated at a trailer-sized length", write("cut.db", data[:cut]), ErrCorrupt, "cut short"},
		{"header only", write("head.db", data[:100]), ErrCorrupt, ""},
		{"trailer missing", write("notrailer.db", data[:len(data)-32]), ErrCorrupt, "SHA-256 trailer"},
		{"bit flipped", write("flipped.db", flipped), ErrCorrupt, "SHA-256 of the database"},
		{"text file", write("policy.yaml", []byte("apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\n")), ErrNotSnapshot, "bbolt database header"},
		{"empty file", write("empty.db", nil), ErrNotSnapshot, "empty"},
		{"random bytes", write("random.db", append(make([]byte, 4096*4), sha256Of(make([]byte, 4096*4))...)), ErrNotSnapshot, ""},
		{"bbolt file of another program", foreign, ErrNotSnapshot, `"key" bucket`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.path)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("Verify error %q should name the file and say %q", err, tc.message)
			}

			// Restore refuses it and leaves an existing empty target, and
			// the folder around it, exactly as they were.
			parent := t.TempDir()
			target := filepath.Join(parent, "etcd")
			if err := os.Mkdir(target, 0o700); err != nil {
				t.Fatal(err)
			}
			_, err = Restore(RestoreOptions{Snapshot: tc.path, DataDir: target})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "left untouched") {
				t.Errorf("Restore error = %v, want %v and 'left untouched'", err, tc.want)
			}
			entries, _ := os.ReadDir(parent)
			if len(entries) != 1 || entries[0].Name() != "etcd" {
				t.Errorf("folder after a refused restore: %v, want only the untouched target", entries)
			}
			if inside, _ := os.ReadDir(target); len(inside) != 0 {
				t.Errorf("target was written to: %v", inside)
			}
		})
	}
}

func TestRestoreRefusesNonEmptyTarget(t *testing.T) {
	snap := snapshotFixture(t)
	parent := t.TempDir()
	target := filepath.Join(parent, "etcd")
	if err := os.MkdirAll(filepath.Join(target, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(RestoreOptions{Snapshot: snap, DataDir: target})
	if !errors.Is(err, ErrTargetNotEmpty) || !strings.Contains(err.Error(), "member") {
		t.Fatalf("Restore into a non-empty dir: err = %v, want ErrTargetNotEmpty naming its content", err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 1 {
		t.Errorf("target changed: %v", entries)
	}
	assertNoTemp(t, parent)

	file := filepath.Join(parent, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(RestoreOptions{Snapshot: snap, DataDir: file}); !errors.Is(err, ErrTargetNotEmpty) {
		t.Errorf("Restore onto a file: err = %v, want ErrTargetNotEmpty", err)
	}
}

func TestSaveNeedsOneEndpoint(t *testing.T) {
	ctx := context.Background()
	for _, ep := range []string{"", "http://a:2379,http://b:2379"} {
		_, err := Save(ctx, ClientOptions{Endpoint: ep}, filepath.Join(t.TempDir(), "x.db"))
		if err == nil || !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("Save with endpoint %q: err = %v, want one about the endpoint", ep, err)
		}
	}
}

func TestHasTrailer(t *testing.T) {
	for n, want := range map[int64]bool{32: true, 512 + 32: true, 4096*5 + 32: true, 4096: false, 0: false, 33: false} {
		if got := hasTrailer(n); got != want {
			t.Errorf("hasTrailer(%d) = %v, want %v", n, got, want)
		}
	}
}

// foreignBolt writes a bbolt database without etcd's buckets, with a
// valid trailer, as a snapshot of another program would look.
func foreignBolt(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("settings"))
		if err != nil {
			return err
		}
		return b.Put([]byte("a"), []byte("b"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%512 != 0 {
		t.Fatalf("bbolt file size %d is not page aligned", len(data))
	}
	if err := os.WriteFile(p, append(data, sha256Of(data)...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".restoring-") || strings.Contains(e.Name(), ".part-") {
			t.Errorf("temporary %s left in %s", e.Name(), dir)
		}
	}
}

func ExampleVerify() {
	_, err := Verify("/nonexistent/backup.db")
	fmt.Println(err != nil)
	// Output: true
}
