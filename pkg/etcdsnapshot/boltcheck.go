package etcdsnapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt reads a database through a memory map with unchecked pointer
// arithmetic: a page id past the end of the file, or a key offset past the
// end of its page, is a fault (SIGSEGV or SIGBUS) that recover cannot catch,
// and its consistency check runs in a goroutine of its own. So before bbolt
// sees an untrusted file, checkPages walks the same structures bbolt will
// follow, with bounds-checked reads, and refuses anything that points
// outside the file or outside its page. The layout is go.etcd.io/bbolt's
// internal/common (page.go, meta.go, inbucket.go); it has been stable since
// bbolt's version 2 format.
const (
	boltVersion = 2

	// Page header: id u64, flags u16, count u16, overflow u32.
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	// Branch element: pos u32, ksize u32, pgid u64. Leaf element: flags
	// u32, pos u32, ksize u32, vsize u32. pos counts from the element.
	elementSize = 16
	// A leaf element with this flag is a sub-bucket: its value is an
	// InBucket (root page id u64, sequence u64), followed, when root is 0,
	// by the bucket's own inline leaf page.
	bucketLeafFlag   = 0x01
	inBucketSize     = 16
	pgidNoFreelist   = ^uint64(0)
	maxFreelistCount = 0xFFFF
)

// boltMeta is the part of a meta page checkPages needs.
type boltMeta struct {
	index                        int // 0 or 1: which meta page
	pageSize                     uint32
	root, freelist, pgid, txid   uint64
	magicOK, versionOK, checksum bool
}

func (m boltMeta) valid() bool { return m.magicOK && m.versionOK && m.checksum }

// parseMeta decodes the meta that starts after the page header in page.
func parseMeta(page []byte, index int) (boltMeta, bool) {
	if len(page) < pageHeaderSize+metaSumLen+8 {
		return boltMeta{}, false
	}
	m := page[pageHeaderSize:]
	sum := fnv.New64a()
	sum.Write(m[:metaSumLen])
	return boltMeta{
		index:     index,
		magicOK:   binary.LittleEndian.Uint32(m[0:]) == boltMagic,
		versionOK: binary.LittleEndian.Uint32(m[4:]) == boltVersion,
		pageSize:  binary.LittleEndian.Uint32(m[8:]),
		root:      binary.LittleEndian.Uint64(m[16:]),
		freelist:  binary.LittleEndian.Uint64(m[32:]),
		pgid:      binary.LittleEndian.Uint64(m[40:]),
		txid:      binary.LittleEndian.Uint64(m[48:]),
		checksum:  sum.Sum64() == binary.LittleEndian.Uint64(m[metaSumLen:]),
	}, true
}

// readMetaAt reads the meta page at off, as bbolt does (a 4 KiB read).
func readMetaAt(r io.ReaderAt, off int64, index int) (boltMeta, bool) {
	buf := make([]byte, 0x1000)
	n, _ := r.ReadAt(buf, off)
	return parseMeta(buf[:n], index)
}

// boltPageSize is the page size bbolt will use for the file: that of the
// first meta page if it is valid, else that of the first valid meta found
// at 1 KiB, 2 KiB, ... (bbolt's getPageSize), else the OS page size.
func boltPageSize(r io.ReaderAt, fileSize int64) int64 {
	if m, ok := readMetaAt(r, 0, 0); ok && m.valid() {
		return int64(m.pageSize)
	}
	for i := 0; i <= 14; i++ {
		pos := int64(1024) << i
		if pos >= fileSize-1024 {
			break
		}
		if m, ok := readMetaAt(r, pos, 1); ok && m.valid() {
			return int64(m.pageSize)
		}
	}
	return int64(os.Getpagesize())
}

// errPages is what checkPages wraps: the message says what is wrong.
var errPages = errors.New("bbolt page structure")

// checkPages checks every valid meta page of the bbolt database in r
// (fileSize bytes, of which dbSize are the database) and every page its
// tree reaches: page ids below the meta's high-water mark, which itself
// fits in the file; branch and leaf pages of the right type whose
// elements, keys and values stay inside the page; sub-buckets whose
// headers and inline pages fit in their value; no page reached twice (a
// cycle); a freelist that fits in its pages and names existing pages.
func checkPages(r io.ReaderAt, fileSize, dbSize int64) error {
	ps := boltPageSize(r, fileSize)
	if ps < 512 || ps > 1<<16 || ps&(ps-1) != 0 {
		return fmt.Errorf("%w: page size %d (a power of two from 512 to 65536 expected)", errPages, ps)
	}
	if fileSize < 2*ps {
		return fmt.Errorf("%w: %d bytes cannot hold the two meta pages of %d bytes", errPages, fileSize, ps)
	}
	filePages := uint64(dbSize / ps)
	valid := 0
	for i := 0; i < 2; i++ {
		m, ok := readMetaAt(r, int64(i)*ps, i)
		if !ok || !m.valid() {
			continue
		}
		valid++
		if m.pgid > filePages {
			return fmt.Errorf("%w: meta page %d: high-water page id %d is past the end of the database (%d pages of %d bytes)", errPages, i, m.pgid, filePages, ps)
		}
		if m.root < 2 || m.root >= m.pgid {
			return fmt.Errorf("%w: meta page %d: root bucket page id %d is outside the database (pages 2 to %d)", errPages, i, m.root, int64(m.pgid)-1)
		}
		if m.freelist != pgidNoFreelist && (m.freelist < 2 || m.freelist >= m.pgid) {
			return fmt.Errorf("%w: meta page %d: freelist page id %d is outside the database (pages 2 to %d)", errPages, i, m.freelist, int64(m.pgid)-1)
		}
		w := pageWalker{r: r, ps: ps, hwm: m.pgid, seen: map[uint64]bool{}}
		if m.freelist != pgidNoFreelist {
			if err := w.checkFreelist(m.freelist); err != nil {
				return fmt.Errorf("%w: meta page %d: %v", errPages, i, err)
			}
		}
		if err := w.walk(m.root); err != nil {
			return fmt.Errorf("%w: meta page %d: %v", errPages, i, err)
		}
	}
	if valid == 0 {
		return fmt.Errorf("%w: no valid meta page at the page size %d", errPages, ps)
	}
	return nil
}

type pageWalker struct {
	r    io.ReaderAt
	ps   int64
	hwm  uint64
	seen map[uint64]bool
}

// read returns page id with its overflow pages, after checking that they
// lie below the high-water mark and were not reached before.
func (w *pageWalker) read(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page id %d is outside the database (pages 2 to %d)", id, w.hwm-1)
	}
	head := make([]byte, pageHeaderSize)
	if _, err := w.r.ReadAt(head, int64(id)*w.ps); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	overflow := uint64(binary.LittleEndian.Uint32(head[12:]))
	if overflow >= w.hwm-id {
		return nil, fmt.Errorf("page %d: %d overflow pages run past the end of the database", id, overflow)
	}
	for p := id; p <= id+overflow; p++ {
		if w.seen[p] {
			return nil, fmt.Errorf("page %d is reached twice (a loop or overlapping pages)", p)
		}
		w.seen[p] = true
	}
	buf := make([]byte, int64(overflow+1)*w.ps)
	if _, err := w.r.ReadAt(buf, int64(id)*w.ps); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	return buf, nil
}

func (w *pageWalker) checkFreelist(id uint64) error {
	buf, err := w.read(id)
	if err != nil {
		return fmt.Errorf("freelist: %v", err)
	}
	if binary.LittleEndian.Uint16(buf[8:])&freelistPageFlag == 0 {
		return fmt.Errorf("freelist page %d is not a freelist page", id)
	}
	count, start := uint64(binary.LittleEndian.Uint16(buf[10:])), uint64(pageHeaderSize)
	if count == maxFreelistCount {
		count, start = binary.LittleEndian.Uint64(buf[pageHeaderSize:]), pageHeaderSize+8
	}
	if count > (uint64(len(buf))-start)/8 {
		return fmt.Errorf("freelist page %d: %d ids do not fit in it", id, count)
	}
	for i := uint64(0); i < count; i++ {
		if free := binary.LittleEndian.Uint64(buf[start+8*i:]); free < 2 || free >= w.hwm {
			return fmt.Errorf("freelist page %d: free page id %d is outside the database", id, free)
		}
	}
	return nil
}

// walk checks the tree of a bucket whose root is page root, and of every
// bucket below it. Pages are visited from an explicit stack: a crafted
// file cannot make the walk recurse deeply.
func (w *pageWalker) walk(root uint64) error {
	type item struct {
		id     uint64
		inline []byte // an inline bucket's page, when id is 0
	}
	stack := []item{{id: root}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		page, where := it.inline, "inline bucket page"
		if page == nil {
			var err error
			if page, err = w.read(it.id); err != nil {
				return err
			}
			where = fmt.Sprintf("page %d", it.id)
		}
		flags := binary.LittleEndian.Uint16(page[8:])
		count := int(binary.LittleEndian.Uint16(page[10:]))
		if count*elementSize > len(page)-pageHeaderSize {
			return fmt.Errorf("%s: %d elements do not fit in it", where, count)
		}
		switch {
		case flags == branchPageFlag && it.inline == nil:
			if count == 0 {
				return fmt.Errorf("%s: an empty branch page", where)
			}
			for i := 0; i < count; i++ {
				e := pageHeaderSize + i*elementSize
				pos, ksize := binary.LittleEndian.Uint32(page[e:]), binary.LittleEndian.Uint32(page[e+4:])
				if uint64(e)+uint64(pos)+uint64(ksize) > uint64(len(page)) {
					return fmt.Errorf("%s: key %d runs past the end of the page", where, i)
				}
				stack = append(stack, item{id: binary.LittleEndian.Uint64(page[e+8:])})
			}
		case flags == leafPageFlag:
			for i := 0; i < count; i++ {
				e := pageHeaderSize + i*elementSize
				eflags := binary.LittleEndian.Uint32(page[e:])
				pos := uint64(binary.LittleEndian.Uint32(page[e+4:]))
				ksize := uint64(binary.LittleEndian.Uint32(page[e+8:]))
				vsize := uint64(binary.LittleEndian.Uint32(page[e+12:]))
				v := uint64(e) + pos + ksize
				if v+vsize > uint64(len(page)) {
					return fmt.Errorf("%s: key or value %d runs past the end of the page", where, i)
				}
				if eflags&bucketLeafFlag == 0 {
					continue
				}
				value := page[v : v+vsize]
				if len(value) < inBucketSize {
					return fmt.Errorf("%s: bucket %d has a %d-byte header (%d expected)", where, i, len(value), inBucketSize)
				}
				if sub := binary.LittleEndian.Uint64(value); sub != 0 {
					stack = append(stack, item{id: sub})
					continue
				}
				if len(value) < inBucketSize+pageHeaderSize {
					return fmt.Errorf("%s: inline bucket %d is too short for its page", where, i)
				}
				stack = append(stack, item{inline: value[inBucketSize:]})
			}
		default:
			return fmt.Errorf("%s: type %#x where a branch or leaf page belongs", where, flags)
		}
	}
	return nil
}
