package etcdsnapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reseal makes a damaged database look intact again: it recomputes the
// checksum of each meta page (FNV-64a over the meta fields, as bbolt does)
// and the SHA-256 trailer, so that only the structural checks can catch
// the damage. It returns false when data is too short or not trailer-sized.
func reseal(data []byte) bool {
	if len(data) < 2*512+sha256Size || !hasTrailer(int64(len(data))) {
		return false
	}
	ps := int(binary.LittleEndian.Uint32(data[pageHeaderSize+8:]))
	db := data[:len(data)-sha256Size]
	for _, off := range []int{0, ps} {
		if ps <= 0 || off+pageHeaderSize+metaSumLen+8 > len(db) {
			continue
		}
		m := db[off+pageHeaderSize:]
		h := fnv.New64a()
		h.Write(m[:metaSumLen])
		binary.LittleEndian.PutUint64(m[metaSumLen:], h.Sum64())
	}
	copy(data[len(db):], sha256Of(db))
	return true
}

const sha256Size = 32

// craftedRoot returns a copy of snapshot whose meta pages point the root
// bucket at page root, with valid checksums and trailer: the file that
// killed `rebound restore etcd` with SIGSEGV when bbolt followed it.
func craftedRoot(t testing.TB, snapshot []byte, root uint64) []byte {
	t.Helper()
	data := append([]byte(nil), snapshot...)
	ps := int(binary.LittleEndian.Uint32(data[pageHeaderSize+8:]))
	for _, off := range []int{0, ps} {
		binary.LittleEndian.PutUint64(data[off+pageHeaderSize+16:], root)
	}
	if !reseal(data) {
		t.Fatal("snapshot too short to craft")
	}
	return data
}

func TestVerifyRefusesPageIDsPastTheEnd(t *testing.T) {
	good, err := os.ReadFile(snapshotFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, root := range []uint64{1 << 20, 1 << 40} {
		t.Run(strconv.FormatUint(root, 10), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("crafted-%d.db", root))
			if err := os.WriteFile(path, craftedRoot(t, good, root), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Verify(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "root bucket page id") || !strings.Contains(err.Error(), "outside the database") {
				t.Fatalf("Verify = %v, want ErrCorrupt naming the file and the page id past the end", err)
			}
			// Restore refuses it and writes nothing.
			parent := t.TempDir()
			target := filepath.Join(parent, "etcd")
			if _, err := Restore(RestoreOptions{Snapshot: path, DataDir: target}); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Restore = %v, want ErrCorrupt", err)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("Restore of a crafted file wrote %v", entries)
			}
		})
	}
}

var faultSink byte

// TestGuardFaultsTurnsAFaultIntoAnError reads a memory map past the end of
// its file (SIGBUS), as bbolt does on a page id that checkPages would have
// missed.
func TestGuardFaultsTurnsAFaultIntoAnError(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "empty"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	err = guardFaults(func() error {
		faultSink = mem[0]
		return nil
	})
	if !errors.Is(err, errFault) {
		t.Fatalf("guardFaults = %v, want errFault", err)
	}
	if err := guardFaults(func() error { return nil }); err != nil {
		t.Errorf("guardFaults(ok) = %v", err)
	}
}

// fuzzHang is long for a 30 KiB file: the machines this runs on are loaded.
const fuzzHang = 60 * time.Second

// FuzzVerify writes arbitrary bytes to a file and verifies it: Verify must
// return an Info or an error, never crash or hang. Each input is tried as
// is and resealed (meta checksums and trailer made valid), so that the
// fuzzer reaches the page checks and bbolt rather than stopping at a
// checksum. The seeds under testdata/fuzz/FuzzVerify are a real snapshot
// (TestWriteFuzzSeeds writes them) and damaged variants of it.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		n++
		path := filepath.Join(dir, "snapshot-"+strconv.Itoa(n)+".db")
		defer os.Remove(path)
		inputs := [][]byte{data}
		if sealed := append([]byte(nil), data...); reseal(sealed) {
			inputs = append(inputs, sealed)
		}
		for _, in := range inputs {
			if err := os.WriteFile(path, in, 0o600); err != nil {
				t.Fatal(err)
			}
			// The fuzzer has no per-input deadline: a hang would only
			// stall it. Crashing the worker makes it save the input.
			watchdog := time.AfterFunc(fuzzHang, func() { panic(fmt.Sprintf("Verify hung for %v on a %d-byte input", fuzzHang, len(in))) })
			info, err := Verify(path)
			watchdog.Stop()
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotSnapshot) {
				t.Fatalf("Verify error %v is neither ErrCorrupt nor ErrNotSnapshot", err)
			}
			if err == nil && len(info.SHA256) != 64 {
				t.Fatalf("Verify accepted it without a digest: %+v", info)
			}
		}
	})
}

func TestFuzzSeedIsASnapshot(t *testing.T) {
	// The snapshot seed must stay a snapshot Verify accepts, or the fuzzer
	// starts from nothing but refusals.
	seed, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzVerify", "snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	body, ok := strings.CutPrefix(string(seed), "go test fuzz v1\n[]byte(")
	if ok {
		body, ok = strings.CutSuffix(body, ")\n")
	}
	raw, err := strconv.Unquote(body)
	if !ok || err != nil {
		t.Fatalf("testdata/fuzz/FuzzVerify/snapshot is not a []byte corpus entry: %v", err)
	}
	path := filepath.Join(t.TempDir(), "seed.db")
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	if info, err := Verify(path); err != nil || info.TotalKeys != 3 {
		t.Fatalf("Verify(snapshot seed) = %+v, %v; want the 3-key snapshot", info, err)
	}
}

// TestWriteFuzzSeeds regenerates the FuzzVerify seed corpus from a fresh
// snapshot: REBOUND_WRITE_FUZZ_SEEDS=1 go test ./pkg/etcdsnapshot -run TestWriteFuzzSeeds
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("REBOUND_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set REBOUND_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzVerify")
	}
	good, err := os.ReadFile(snapshotFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0xff
	seeds := map[string][]byte{
		"snapshot":              good,
		"truncated":             good[:len(good)/2],
		"header-only":           good[:4096],
		"no-trailer":            good[:len(good)-sha256Size],
		"bit-flipped":           flipped,
		"root-past-the-end":     craftedRoot(t, good, 1<<20),
		"root-far-past-the-end": craftedRoot(t, good, 1<<40),
		"empty":                 nil,
	}
	out := filepath.Join("testdata", "fuzz", "FuzzVerify")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seeds {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(out, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
