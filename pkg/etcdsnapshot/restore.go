package etcdsnapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	utlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// ErrTargetNotEmpty: the data dir to restore into already holds something.
var ErrTargetNotEmpty = errors.New("restore target is not empty")

// RestoreOptions describe the new single-member etcd a snapshot becomes.
// The member flags must match those etcd is started with on the restored
// data dir (--name, --initial-advertise-peer-urls, --initial-cluster).
type RestoreOptions struct {
	// Snapshot is the file Save (or etcdctl snapshot save) wrote.
	Snapshot string
	// DataDir is the new etcd data dir. It must not exist, or be empty.
	DataDir string
	// Name is the member name; "default" when empty (etcd's default).
	Name string
	// PeerURL is the member's advertised peer URL; http://localhost:2380
	// when empty (etcd's default).
	PeerURL string
	// InitialClusterToken; "etcd-cluster" when empty (etcd's default).
	InitialClusterToken string
}

func (o *RestoreOptions) setDefaults() {
	if o.Name == "" {
		o.Name = "default"
	}
	if o.PeerURL == "" {
		o.PeerURL = "http://localhost:2380"
	}
	if o.InitialClusterToken == "" {
		o.InitialClusterToken = "etcd-cluster"
	}
}

// Restore verifies the snapshot (Verify), then restores it with etcdutl's
// snapshot restore into a temporary folder next to DataDir and renames that
// folder to DataDir. On any error DataDir is left as it was and the
// temporary folder is removed.
func Restore(opts RestoreOptions) (Info, error) {
	opts.setDefaults()
	if opts.DataDir == "" {
		return Info{}, errors.New("restore: the target data dir is empty: name a new folder")
	}
	target, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return Info{}, err
	}
	info, err := Verify(opts.Snapshot)
	if err != nil {
		return info, fmt.Errorf("restore refused, %s left untouched: %w", target, err)
	}
	if err := checkEmpty(target); err != nil {
		return info, err
	}
	parent := filepath.Dir(target)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(target)+".restoring-")
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := etcdutlRestore(utlsnapshot.RestoreConfig{
		SnapshotPath:        opts.Snapshot,
		Name:                opts.Name,
		OutputDataDir:       tmp,
		PeerURLs:            []string{opts.PeerURL},
		InitialCluster:      opts.Name + "=" + opts.PeerURL,
		InitialClusterToken: opts.InitialClusterToken,
	}); err != nil {
		return info, fmt.Errorf("restore %s into %s: %w", opts.Snapshot, target, err)
	}
	// rename(2) replaces an empty directory and fails on a non-empty one,
	// so a target filled in the meantime is not overwritten either.
	if err := os.Rename(tmp, target); err != nil {
		return info, fmt.Errorf("restore: move the restored data dir into place: %w", err)
	}
	ok = true
	return info, nil
}

// checkEmpty accepts a missing path or an empty directory.
func checkEmpty(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %w: it is a file; name a new folder", dir, ErrTargetNotEmpty)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s: %w (%d entries, e.g. %s): restore into a new folder, never over an existing data dir",
			dir, ErrTargetNotEmpty, len(entries), entries[0].Name())
	}
	return nil
}

func etcdutlRestore(cfg utlsnapshot.RestoreConfig) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("etcdutl restore failed: %v", r)
		}
	}()
	return utlsnapshot.NewV3(zap.NewNop()).Restore(cfg)
}
