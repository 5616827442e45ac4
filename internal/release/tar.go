package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// entry is one file or folder of an archive. Every archive of a release
// is written from entries with fixed owners and one timestamp, in sorted
// order, so it depends only on its contents.
type entry struct {
	Name     string // slash-separated, no leading slash; folders end in "/"
	Mode     int64
	UID, GID int
	Data     []byte
	Link     string // symlink target
}

// writeTar writes entries as a tar stream, every header stamped mtime.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	sorted := append([]entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	tw := tar.NewWriter(w)
	for _, e := range sorted {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Uid: e.UID, Gid: e.GID, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case e.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
		case len(e.Name) > 0 && e.Name[len(e.Name)-1] == '/':
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// tarBytes is writeTar into memory.
func tarBytes(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	err := writeTar(&b, entries, mtime)
	return b.Bytes(), err
}

// writeTarGz writes entries as a gzipped tar file, with no name or time in
// the gzip header.
func writeTarGz(path string, entries []entry, mtime time.Time) error {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := writeTar(zw, entries, mtime); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// dirEntries reads the files under dir as entries named prefix+relative
// path (for the OCI layout folder go-containerregistry writes).
func dirEntries(dir, prefix string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		name := prefix + filepath.ToSlash(rel)
		if d.IsDir() {
			out = append(out, entry{Name: name + "/", Mode: 0o755})
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, entry{Name: name, Mode: 0o644, Data: data})
		return nil
	})
	return out, err
}
