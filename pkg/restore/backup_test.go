package restore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rebound/pkg/etcdsnapshot"
)

func TestBackupRefusesBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "backup.db")
	if err := os.WriteFile(existing+MetadataSuffix, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	etcd := etcdsnapshot.ClientOptions{Endpoint: "http://127.0.0.1:1"}
	if _, err := Backup(ctx, BackupOptions{Etcd: etcd, Out: existing}); ExitCodeOf(err) != ExitBadInput || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("metadata file exists: err %v, want bad input", err)
	}
	if _, err := Backup(ctx, BackupOptions{Etcd: etcd}); ExitCodeOf(err) != ExitBadInput {
		t.Errorf("no --out: err %v, want bad input", err)
	}
	if _, err := os.Stat(existing); !os.IsNotExist(err) {
		t.Errorf("a refused backup wrote %s", existing)
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "b.db")
	m := &Metadata{Kind: MetadataKind, Version: 1, Snapshot: "b.db", Nodes: []string{"node-0"}, Revision: 42}
	if err := writeJSONNew(snap+MetadataSuffix, m); err != nil {
		t.Fatal(err)
	}
	if err := writeJSONNew(snap+MetadataSuffix, m); err == nil {
		t.Error("metadata overwritten")
	}
	got, err := ReadMetadata(snap)
	if err != nil || got.Revision != 42 || got.Nodes[0] != "node-0" {
		t.Errorf("ReadMetadata = %+v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.db"+MetadataSuffix), []byte(`{"kind":"Other"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetadata(filepath.Join(dir, "x.db")); err == nil {
		t.Error("a metadata file of another kind was accepted")
	}
}

func TestParsePolicy(t *testing.T) {
	good := []byte("apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {name: platform}\nspec:\n  critical: {namespaces: [kube-system]}\n")
	p, err := ParsePolicy(good, "p.yaml")
	if err != nil || p.Name != "platform" {
		t.Fatalf("ParsePolicy = %v, %v", p, err)
	}
	bad := []byte("apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {name: x}\nspec:\n  critical: {}\n  colour: red\n")
	if _, err := ParsePolicy(bad, "bad.yaml"); ExitCodeOf(err) != ExitBadInput || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), "colour") {
		t.Errorf("bad policy: err %v", err)
	}
}
