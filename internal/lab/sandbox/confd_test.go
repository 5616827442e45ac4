package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfdSource(t *testing.T) {
	checkout := t.TempDir()
	src := filepath.Join(checkout, ConfdSourceDefault)
	t.Setenv(ConfdSourceEnv, "")
	if dir, ok := ConfdSource(checkout); ok || dir != src {
		t.Errorf("ConfdSource without the folder = %s, %v; want %s, false", dir, ok, src)
	}
	if err := os.MkdirAll(filepath.Join(src, "confd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "confd", "confd.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dir, ok := ConfdSource(checkout); !ok || dir != src {
		t.Errorf("ConfdSource with the folder = %s, %v; want %s, true", dir, ok, src)
	}
	other := t.TempDir()
	t.Setenv(ConfdSourceEnv, other)
	if dir, ok := ConfdSource(checkout); ok || dir != other {
		t.Errorf("ConfdSource with %s set to an empty folder = %s, %v; want %s, false", ConfdSourceEnv, dir, ok, other)
	}
}

func TestEnsureConfdNoSource(t *testing.T) {
	_, err := EnsureConfd(context.Background(), ConfdBuildOptions{SourceDir: t.TempDir(), CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), ConfdSourceEnv) {
		t.Errorf("EnsureConfd without a source: %v, want an error naming %s", err, ConfdSourceEnv)
	}
}
