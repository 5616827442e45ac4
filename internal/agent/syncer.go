package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"rebound/pkg/peering/bird"
)

// Control is the part of BIRD's control socket the agent uses;
// bird.Client implements it.
type Control interface {
	Configure(ctx context.Context) error
	Protocols(ctx context.Context) ([]bird.Protocol, error)
	// Status is `show status`: its server time resolves the since column.
	Status(ctx context.Context) (bird.Status, error)
}

// Outcome is what one Sync did.
type Outcome string

// Outcomes of Sync.
const (
	// Unchanged: the rendered configuration is the one BIRD already has;
	// nothing was written or reloaded.
	Unchanged Outcome = "Unchanged"
	// Reloaded: the new configuration is in place and BIRD accepted it.
	Reloaded Outcome = "Reloaded"
	// Rejected: BIRD refused the new configuration; the last one it
	// accepted was put back.
	Rejected Outcome = "Rejected"
	// Unreachable: BIRD did not answer; the last configuration it accepted
	// was put back, and the new one is tried again later.
	Unreachable Outcome = "Unreachable"
	// Invalid: the peer set could not be rendered (a value failed
	// validation); nothing was written.
	Invalid Outcome = "Invalid"
	// Staged: BIRD did not answer, but the new configuration passed BIRD's
	// own parser (bird -p, see Syncer.SetCheck), so it stays in place for
	// BIRD's next start; the reload is tried again later.
	Staged Outcome = "Staged"
)

// Syncer keeps one BIRD mesh include file in step with a peer set. It is
// not safe for concurrent use; the agent calls it from one goroutine.
//
// The include file always holds a configuration BIRD accepted, except
// while a reload is in flight: a new file is written to a temporary file
// in the same folder and renamed over the old one (so BIRD never reads a
// half-written file), `configure` is sent, and if BIRD refuses it or does
// not answer, the previous bytes are renamed back in the same way.
type Syncer struct {
	path    string
	control Control
	base    bird.MeshConfig

	// lastGood is the content BIRD last accepted, or the file found at
	// start (what a running BIRD was most likely started with).
	lastGood []byte
	hasGood  bool
	// applied is what the last successful configure loaded; nil until one
	// succeeded, so the first Sync always reloads.
	applied []byte
	// check, when set, runs BIRD's parser on the main configuration.
	check func(ctx context.Context) error
}

// SetCheck makes the Syncer validate a new file with check (typically
// `bird -p -c MAIN`, see ParseCheck) when BIRD cannot be reached: a file
// that passes stays in place for BIRD's next start instead of being rolled
// back. This matters for a BIRD that is about to start in graceful-restart
// recovery: BIRD 2 (2.0.12, measured) keeps waiting for a protocol that a
// reconfiguration removes, so it must start with the set already in place.
func (s *Syncer) SetCheck(check func(ctx context.Context) error) { s.check = check }

// ParseCheck returns a check that runs `birdBinary -p -c mainConfig`, the
// daemon's own parser, without touching a running BIRD.
func ParseCheck(birdBinary, mainConfig string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, birdBinary, "-p", "-c", mainConfig).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s -p -c %s: %v: %s", birdBinary, mainConfig, err, bytes.TrimSpace(out))
		}
		return nil
	}
}

// NewSyncer prepares a Syncer for the include file at path. base is the
// mesh without peers; its Address must be set. An existing file is kept
// as the last good configuration.
func NewSyncer(path string, control Control, base bird.MeshConfig) (*Syncer, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("mesh file %q: want an absolute path", path)
	}
	s := &Syncer{path: path, control: control, base: base}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		s.lastGood, s.hasGood = data, true
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("mesh file %s: %w", path, err)
	}
	return s, nil
}

// Path is the include file.
func (s *Syncer) Path() string { return s.path }

// Render returns the include file for peers, without writing it.
func (s *Syncer) Render(peers []bird.Peer) ([]byte, error) {
	cfg := s.base
	cfg.Peers = peers
	return bird.RenderMesh(cfg)
}

// Sync renders peers and, when the result differs from what BIRD has,
// writes it and reloads BIRD. The error explains any outcome other than
// Unchanged and Reloaded.
func (s *Syncer) Sync(ctx context.Context, peers []bird.Peer) (Outcome, error) {
	want, err := s.Render(peers)
	if err != nil {
		return Invalid, fmt.Errorf("render %s: %w", s.path, err)
	}
	if s.applied != nil && bytes.Equal(want, s.applied) {
		return Unchanged, nil
	}
	onDisk, readErr := os.ReadFile(s.path)
	if readErr != nil || !bytes.Equal(onDisk, want) {
		if err := writeAtomic(s.path, want); err != nil {
			return Unreachable, fmt.Errorf("write %s: %w", s.path, err)
		}
	}
	err = s.control.Configure(ctx)
	if err == nil {
		s.applied, s.lastGood, s.hasGood = want, want, true
		return Reloaded, nil
	}
	outcome := Unreachable
	var ce *bird.ConfigError
	if errors.As(err, &ce) {
		outcome = Rejected
	}
	if outcome == Unreachable && s.check != nil {
		cerr := s.check(ctx)
		if cerr == nil {
			s.lastGood, s.hasGood = want, true
			return Staged, fmt.Errorf("%w; the new configuration passed BIRD's parser and stays in %s for BIRD's start", err, s.path)
		}
		err = fmt.Errorf("%w; BIRD's parser rejects the new configuration too: %v", err, cerr)
	}
	restored := ""
	if s.hasGood && !bytes.Equal(s.lastGood, want) {
		if werr := writeAtomic(s.path, s.lastGood); werr != nil {
			return outcome, fmt.Errorf("%w; restoring the last good %s failed too: %v", err, s.path, werr)
		}
		restored = "; the last configuration BIRD accepted is back in " + s.path
	} else if !s.hasGood {
		restored = "; there is no earlier configuration to put back, " + s.path + " keeps the new one"
	}
	return outcome, fmt.Errorf("%w%s", err, restored)
}

// writeAtomic replaces path with data: a temporary file in the same
// folder, synced, then renamed over path, so a reader sees the old bytes
// or the new ones, never a mix.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(name, 0o644); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return nil
}
