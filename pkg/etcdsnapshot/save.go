package etcdsnapshot

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ClientOptions say how to reach one etcd member.
type ClientOptions struct {
	// Endpoint is the member's client URL, e.g. https://127.0.0.1:2379.
	// A snapshot is a point-in-time copy of one member, so exactly one.
	Endpoint string
	// CACert, Cert and Key are PEM files for TLS (etcdctl's --cacert,
	// --cert, --key); empty for plain http.
	CACert, Cert, Key string
	// DialTimeout bounds the connection; 0 means 10s.
	DialTimeout time.Duration
}

func (o ClientOptions) client() (*clientv3.Client, error) {
	if o.Endpoint == "" {
		return nil, errors.New("etcd endpoint is empty: give the client URL of one etcd member, e.g. https://127.0.0.1:2379")
	}
	if strings.Contains(o.Endpoint, ",") {
		return nil, fmt.Errorf("etcd endpoint %q lists several members: a snapshot is taken from one member, give one URL", o.Endpoint)
	}
	cfg := clientv3.Config{
		Endpoints:   []string{o.Endpoint},
		DialTimeout: o.DialTimeout,
		Logger:      zap.NewNop(),
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if o.CACert != "" || o.Cert != "" || o.Key != "" {
		tlsInfo := transport.TLSInfo{CertFile: o.Cert, KeyFile: o.Key, TrustedCAFile: o.CACert}
		var tc *tls.Config
		tc, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

// SaveResult is what Save wrote.
type SaveResult struct {
	Info
	// EtcdVersion is the version of the member that streamed the snapshot.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Endpoint is the member it came from.
	Endpoint string `json:"endpoint"`
}

// Save streams a snapshot from one etcd member (the Maintenance API's
// snapshot stream) into path, verifies it, and only then renames it into
// place. It refuses to overwrite an existing file.
func Save(ctx context.Context, opts ClientOptions, path string) (SaveResult, error) {
	res := SaveResult{Endpoint: opts.Endpoint}
	if _, err := os.Lstat(path); err == nil {
		return res, fmt.Errorf("%s already exists: choose a new file name (a backup is never overwritten)", path)
	}
	cli, err := opts.client()
	if err != nil {
		return res, err
	}
	defer cli.Close()

	part, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-")
	if err != nil {
		return res, fmt.Errorf("create snapshot file: %w", err)
	}
	partPath := part.Name()
	done := false
	defer func() {
		if !done {
			part.Close()
			os.Remove(partPath)
		}
	}()

	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return res, fmt.Errorf("etcd %s: open snapshot stream: %w", opts.Endpoint, explain(err))
	}
	defer resp.Snapshot.Close()
	res.EtcdVersion = resp.Version
	size, err := io.Copy(part, resp.Snapshot)
	if err != nil {
		return res, fmt.Errorf("etcd %s: snapshot stream broke after %d bytes: %w", opts.Endpoint, size, explain(err))
	}
	if err := part.Sync(); err != nil {
		return res, err
	}
	if err := part.Close(); err != nil {
		return res, err
	}
	info, err := Verify(partPath)
	if err != nil {
		return res, fmt.Errorf("etcd %s streamed a snapshot that does not verify: %w", opts.Endpoint, err)
	}
	if err := os.Chmod(partPath, 0o600); err != nil {
		return res, err
	}
	// Link, not rename: link fails if path appeared meanwhile, so a backup
	// written by someone else is never replaced.
	if err := os.Link(partPath, path); err != nil {
		return res, fmt.Errorf("save snapshot as %s: %w", path, err)
	}
	done = true
	os.Remove(partPath)
	info.Path = path
	res.Info = info
	return res, nil
}

// ListKeys returns the keys under prefix (keys only, sorted), e.g. the
// Node objects under /registry/minions/ of a Kubernetes etcd.
func ListKeys(ctx context.Context, opts ClientOptions, prefix string) ([]string, error) {
	cli, err := opts.client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcd %s: list %s: %w", opts.Endpoint, prefix, explain(err))
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	sort.Strings(keys)
	return keys, nil
}

// explain adds what to check to a timeout: the etcd client retries an
// unreachable member until the context ends.
func explain(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer (is etcd running at that URL, and does it need --cacert, --cert and --key?)", err)
	}
	return err
}
