// Package etcdsnapshot takes, checks and restores etcd snapshots with the
// etcd libraries themselves (the client's snapshot stream and etcdutl's
// restore), so that a platform backup and restore needs no other tool.
//
// A snapshot is what etcd's snapshot API streams: a bbolt database followed
// by the SHA-256 of the database (32 bytes), the whole padded so that its
// size is a multiple of 512 plus 32. Verify checks all of it before Restore
// writes anything, and Restore never touches a target that is not empty:
// it restores into a temporary folder next to the target and renames it at
// the end.
package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	utlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// ErrNotSnapshot: the file is not an etcd snapshot at all (another kind of
// file, or a bbolt database that is not etcd's).
var ErrNotSnapshot = errors.New("not an etcd snapshot")

// ErrCorrupt: the file is an etcd snapshot, but truncated or damaged.
var ErrCorrupt = errors.New("corrupt or truncated etcd snapshot")

// Info describes a verified snapshot.
type Info struct {
	Path string `json:"path"`
	// Size is the file's size in bytes, trailer included.
	Size int64 `json:"sizeBytes"`
	// SHA256 is the database's digest, as stored in the trailer (hex).
	SHA256 string `json:"sha256"`
	// Revision is the etcd revision of the newest key in the snapshot.
	Revision int64 `json:"revision"`
	// TotalKeys counts the live keys.
	TotalKeys int `json:"totalKeys"`
	// StorageVersion is the etcd storage version that wrote the snapshot
	// (empty before etcd 3.6).
	StorageVersion string `json:"storageVersion,omitempty"`
}

// boltMagic marks a bbolt meta page (go.etcd.io/bbolt internal/common).
const boltMagic = 0xED0CDAED

// Layout of a bbolt meta page: a 16-byte page header, then magic, version,
// page size, flags (4 bytes each), root bucket (16), freelist page (8),
// high-water page id (8), transaction id (8) and an FNV-64a checksum of the
// meta fields before it.
const (
	pageHeaderSize = 16
	metaSumLen     = 56 // bytes of the meta covered by its checksum
	minDBSize      = 4 * 1024
)

// hasTrailer reports whether a file of size n carries the SHA-256 trailer
// etcd appends to every snapshot it streams (see etcd's hasChecksum).
func hasTrailer(n int64) bool { return n%512 == sha256.Size }

// Verify checks that path is a complete etcd snapshot: a bbolt database
// (magic and meta page checksum), not shorter than its own header says,
// followed by a SHA-256 trailer that matches the database, whose pages pass
// bbolt's consistency check and which holds etcd's buckets. Errors wrap
// ErrNotSnapshot or ErrCorrupt and say what was found. The file is
// untrusted: every page bbolt will follow is bounds-checked first
// (checkPages) and the bbolt part runs under guardFaults, so no file can
// crash the process (FuzzVerify).
func Verify(path string) (Info, error) {
	info := Info{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return info, fmt.Errorf("open snapshot: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return info, fmt.Errorf("open snapshot: %w", err)
	}
	if !st.Mode().IsRegular() {
		return info, fmt.Errorf("%s: %w: not a regular file", path, ErrNotSnapshot)
	}
	info.Size = st.Size()
	if info.Size == 0 {
		return info, fmt.Errorf("%s: %w: the file is empty", path, ErrNotSnapshot)
	}

	head := make([]byte, 2*minDBSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return info, fmt.Errorf("read snapshot: %w", err)
	}
	head = head[:n]
	wantDB, err := dbSizeFromHeader(head)
	if err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}

	if !hasTrailer(info.Size) {
		return info, fmt.Errorf("%s: %w: %d bytes is not a multiple of 512 plus the 32-byte SHA-256 trailer that etcd's snapshot API appends; "+
			"the file was cut short or is a copy of a data dir's member/snap/db (take a new one with `rebound backup`)", path, ErrCorrupt, info.Size)
	}
	dbSize := info.Size - sha256.Size
	if dbSize < wantDB {
		return info, fmt.Errorf("%s: %w: the database header says %d bytes but the file holds %d: it was cut short", path, ErrCorrupt, wantDB, dbSize)
	}

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return info, err
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, dbSize); err != nil {
		return info, fmt.Errorf("read snapshot: %w", err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return info, fmt.Errorf("read snapshot trailer: %w", err)
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, trailer) {
		return info, fmt.Errorf("%s: %w: SHA-256 of the database is %x but the trailer says %x: the file was damaged after it was taken",
			path, ErrCorrupt, sum[:8], trailer[:8])
	}
	info.SHA256 = hex.EncodeToString(trailer)

	// A file can be damaged before etcd streamed it, or crafted with a
	// matching trailer: check what bbolt will follow before it maps the file.
	if err := checkPages(f, info.Size, dbSize); err != nil {
		return info, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	if err := guardFaults(func() error { return checkBuckets(path) }); err != nil {
		if errors.Is(err, errFault) {
			return info, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
		}
		return info, err
	}
	var status utlsnapshot.Status
	if err := guardFaults(func() (err error) { status, err = statusOf(path); return err }); err != nil {
		return info, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	info.Revision, info.TotalKeys, info.StorageVersion = status.Revision, status.TotalKey, status.Version
	return info, nil
}

// dbSizeFromHeader reads the two bbolt meta pages at the start of the file
// and returns the database size the newest valid one claims (high-water
// page id times page size).
func dbSizeFromHeader(head []byte) (int64, error) {
	if len(head) < pageHeaderSize+metaSumLen+8 {
		return 0, fmt.Errorf("%w: only %d bytes, too short for the bbolt database header every etcd snapshot starts with", ErrNotSnapshot, len(head))
	}
	if binary.LittleEndian.Uint32(head[pageHeaderSize:]) != boltMagic {
		return 0, fmt.Errorf("%w: no bbolt database header (first bytes %q); give the file `rebound backup` or `etcdctl snapshot save` wrote",
			ErrNotSnapshot, printable(head[:min(len(head), 16)]))
	}
	pageSize := int64(binary.LittleEndian.Uint32(head[pageHeaderSize+8:]))
	if pageSize < 512 || pageSize > 1<<16 || pageSize&(pageSize-1) != 0 {
		return 0, fmt.Errorf("%w: database header damaged (page size %d)", ErrCorrupt, pageSize)
	}
	var best int64
	var bestTx uint64
	valid := 0
	for i := int64(0); i < 2 && i*pageSize < int64(len(head)); i++ {
		m, ok := parseMeta(head[i*pageSize:], int(i))
		if !ok {
			break
		}
		if !m.magicOK || !m.checksum {
			continue
		}
		valid++
		if valid == 1 || m.txid > bestTx {
			best, bestTx = int64(m.pgid)*pageSize, m.txid
		}
	}
	if valid == 0 {
		return 0, fmt.Errorf("%w: both database meta pages fail their checksum (or the file stops inside them)", ErrCorrupt)
	}
	return best, nil
}

// checkBuckets opens the database read-only and checks that it has etcd's
// "key" and "meta" buckets: a bbolt file of another program is not a
// snapshot.
func checkBuckets(path string) error {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		for _, b := range []string{"key", "meta"} {
			if tx.Bucket([]byte(b)) == nil {
				return fmt.Errorf("%s: %w: a bbolt database without etcd's %q bucket", path, ErrNotSnapshot, b)
			}
		}
		return nil
	})
}

// statusOf runs etcdutl's snapshot status, which walks every page (bbolt's
// Tx.Check) and every key, and reads the revision.
func statusOf(path string) (utlsnapshot.Status, error) {
	return utlsnapshot.NewV3(zap.NewNop()).Status(path)
}

// errFault: reading the file through bbolt panicked or faulted.
var errFault = errors.New("reading it failed")

// guardFaults runs fn, which reads an untrusted file through bbolt's
// memory map, so that a panic, or a memory fault that checkPages did not
// foresee, becomes an error instead of killing the process:
// debug.SetPanicOnFault turns the fault into a panic on this goroutine
// (restored afterwards), and recover catches it.
func guardFaults(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errFault, r)
		}
	}()
	return fn()
}

// printable renders bytes for an error message without control characters.
func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		out[i] = c
	}
	return string(out)
}
