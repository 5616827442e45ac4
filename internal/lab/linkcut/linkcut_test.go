package linkcut

import (
	"net/netip"
	"path/filepath"
	"testing"
)

func TestWriteAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cut")
	a, b := netip.MustParseAddr("127.13.1.1"), netip.MustParseAddr("127.13.1.2")
	cut := Reader(path, 0)
	if cut(a) {
		t.Fatal("no file: a link is cut")
	}
	if err := Write(path, a); err != nil {
		t.Fatal(err)
	}
	if !cut(a) || cut(b) {
		t.Fatalf("after cutting %s: cut(a)=%v cut(b)=%v", a, cut(a), cut(b))
	}
	if err := Write(path); err != nil {
		t.Fatal(err)
	}
	if cut(a) {
		t.Fatal("healed, yet cut")
	}
}
