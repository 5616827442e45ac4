package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultKeyReloadInterval is how often the member re-reads
// --gossip-key-file. A rotation step is safe once every member has read
// it: this plus the kubelet's Secret sync (up to a minute by default).
const DefaultKeyReloadInterval = 10 * time.Second

// LoadKeys reads the gossip keyring from path (--gossip-key-file): one
// base64 AES key of 16, 24 or 32 bytes per line, as `openssl rand -base64
// 32` prints it; the first is the primary, which encrypts, and every key
// decrypts. A key rotation writes "old\nnew" everywhere, then "new\nold",
// then "new" (docs/install.md). A file of one raw 16, 24 or 32 byte key
// is read too. Empty lines are skipped, repeated keys kept once.
func LoadKeys(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--gossip-key-file %s: no such file: mount the gossip key Secret there, or create one with: kubectl create secret generic rebound-gossip-key --from-literal=key=\"$(openssl rand -base64 32)\"", path)
		}
		return nil, fmt.Errorf("--gossip-key-file %s: %w", path, err)
	}
	keys, lineErr := parseKeyLines(path, data)
	if lineErr == nil {
		return keys, nil
	}
	// A raw random key is practically never base64 text of a key length:
	// base64 is tried first.
	if ValidateKey(data) == nil {
		return [][]byte{data}, nil
	}
	return nil, lineErr
}

func parseKeyLines(path string, data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file %s line %d: not base64 (%v): want one base64 AES key per line, the primary first, as openssl rand -base64 32 prints it", path, i+1, err)
		}
		if err := ValidateKey(key); err != nil {
			return nil, fmt.Errorf("--gossip-key-file %s line %d: %v: make one with openssl rand -base64 32", path, i+1, err)
		}
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) }) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--gossip-key-file %s holds %d bytes and no key: want one base64 AES key of 16, 24 or 32 bytes per line (openssl rand -base64 32)", path, len(data))
	}
	return keys, nil
}

// LoadKey reads the primary key of --gossip-key-file (LoadKeys).
func LoadKey(path string) ([]byte, error) {
	keys, err := LoadKeys(path)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// keyID names a key in logs without revealing it: the first 4 bytes of
// its SHA-256.
func keyID(k []byte) string {
	s := sha256.Sum256(k)
	return hex.EncodeToString(s[:4])
}

func keyIDs(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = keyID(k)
	}
	return out
}

// applyKeys makes the keyring hold exactly keys, keys[0] the primary: the
// new ones are installed first, then the primary switched, then the ones
// no longer listed removed, so that at no moment does the member lack a
// key the file lists. changed says whether anything changed.
func applyKeys(kr *memberlist.Keyring, keys [][]byte) (changed bool, err error) {
	has := func(set [][]byte, k []byte) bool {
		return slices.ContainsFunc(set, func(x []byte) bool { return bytes.Equal(x, k) })
	}
	installed := kr.GetKeys()
	for _, k := range keys {
		if !has(installed, k) {
			if err := kr.AddKey(k); err != nil {
				return changed, fmt.Errorf("install key %s: %w", keyID(k), err)
			}
			changed = true
		}
	}
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return changed, fmt.Errorf("use key %s: %w", keyID(keys[0]), err)
		}
		changed = true
	}
	for _, k := range installed {
		if !has(keys, k) {
			// The primary is keys[0] by now: memberlist refuses to remove
			// the primary, and it is never asked to.
			if err := kr.RemoveKey(k); err != nil {
				return changed, fmt.Errorf("remove key %s: %w", keyID(k), err)
			}
			changed = true
		}
	}
	return changed, nil
}
