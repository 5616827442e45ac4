// Package confdlab runs Calico's own BIRD-config renderer, confd, for the
// BIRD nodes of a lab: one confd per node in Kubernetes-datastore mode
// against a sandbox's apiserver, rendering into that node's folder and
// reloading that node's BIRD through its control socket, as calico-node
// does on a real node. It also creates the Calico objects calico-node and
// Calico's installation would (Node annotations, a BGPConfiguration, an
// IPPool and each node's block affinity), so that every line of the
// rendered bird.cfg comes from Calico's code and Calico's objects.
//
// confd is built from Calico's source by sandbox.EnsureConfd. Safety: the
// BIRDs it configures run in the lab's network namespace (confd's bird.cfg
// has a kernel protocol), the pool is in 198.18.0.0/15 (RFC 2544) with
// VXLAN encapsulation, so BIRD programs none of it into a kernel table.
package confdlab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/birdproc"
)

// TemplatesDir is where confd's templates and conf.d sit in its source.
const TemplatesDir = "confd/etc/calico/confd"

// templates are the IPv4 templates a node needs: the main file and the two
// it includes. The IPv6 ones (bird6*) would call bird6, which the lab has
// not.
var templates = []string{"bird", "bird_aggr", "bird_ipam"}

// Options say how one node's confd runs.
type Options struct {
	// Binary is confd (sandbox.EnsureConfd); Source is the folder it was
	// built from, whose TemplatesDir is copied.
	Binary, Source string
	// Dir is the node's folder: its conf.d and templates, the rendered
	// files, confd's log. Short: BIRD's socket may sit there too.
	Dir string
	// Kubeconfig reaches the apiserver; NodeName is the Node confd renders
	// for (confd's NODENAME).
	Kubeconfig, NodeName string
	// Bins are the BIRD binaries: bird checks a rendered file (check_cmd),
	// birdc reloads the node's BIRD at Socket (reload_cmd).
	Bins   birdproc.Binaries
	Socket string
	// APIGroup is confd's CALICO_API_GROUP; empty leaves confd its own
	// choice (crd.projectcalico.org/v1 whenever it is served).
	APIGroup string
}

// Confd is one running confd.
type Confd struct {
	opts   Options
	Config string // the rendered bird.cfg, BIRD's -c
	Log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Prepare writes the node's confd configuration (Config, without starting
// confd): a copy of confd's templates whose conf.d `dest` paths point into
// Dir, whose `reload_cmd` is `birdc -s <Socket> configure` and whose
// `check_cmd` is `bird -p -c {{.src}}` with the lab's binaries (calico-node's
// own are `sv hup bird` and a bird at its path), and whose bird.cfg
// includes its two files by absolute path (calico-node runs BIRD in the
// folder of the files; the lab's BIRDs run elsewhere).
func Prepare(opts Options) (*Confd, error) {
	if opts.Binary == "" || opts.Source == "" || opts.Dir == "" || opts.NodeName == "" || opts.Kubeconfig == "" || opts.Socket == "" {
		return nil, errors.New("confdlab: Binary, Source, Dir, Kubeconfig, NodeName and Socket are required")
	}
	src := filepath.Join(opts.Source, TemplatesDir)
	// status/endpoint-status: confd watches it for calico-node's endpoint
	// status files and logs an error every 30 s while it is missing.
	for _, d := range []string{"conf.d", "templates", "status/endpoint-status"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, "confd", d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, name := range templates {
		tmpl, err := os.ReadFile(filepath.Join(src, "templates", name+".cfg.template"))
		if err != nil {
			return nil, fmt.Errorf("confdlab: confd's templates: %w", err)
		}
		tmpl = includeRE.ReplaceAllFunc(tmpl, func(m []byte) []byte {
			file := includeRE.FindSubmatch(m)[1]
			return fmt.Appendf(nil, "include %q;", filepath.Join(opts.Dir, string(file)))
		})
		if err := os.WriteFile(filepath.Join(opts.Dir, "confd", "templates", name+".cfg.template"), tmpl, 0o644); err != nil {
			return nil, err
		}
		toml, err := os.ReadFile(filepath.Join(src, "conf.d", name+".toml"))
		if err != nil {
			return nil, fmt.Errorf("confdlab: confd's conf.d: %w", err)
		}
		out, err := rewriteTOML(string(toml), opts, name+".cfg")
		if err != nil {
			return nil, fmt.Errorf("confdlab: %s.toml: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(opts.Dir, "confd", "conf.d", name+".toml"), []byte(out), 0o644); err != nil {
			return nil, err
		}
	}
	return &Confd{opts: opts, Config: filepath.Join(opts.Dir, "bird.cfg"), Log: filepath.Join(opts.Dir, "confd.log")}, nil
}

var includeRE = regexp.MustCompile(`include "([^"/]+)";`)

// rewriteTOML points a conf.d file's dest into the node's folder and its
// commands at the lab's BIRD; every other line (src, prefix, keys) stays
// Calico's.
func rewriteTOML(toml string, opts Options, dest string) (string, error) {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(toml, "\n") {
		key, _, _ := strings.Cut(line, "=")
		switch strings.TrimSpace(key) {
		case "dest":
			line = fmt.Sprintf("dest = %q", filepath.Join(opts.Dir, dest))
		case "reload_cmd":
			line = fmt.Sprintf("reload_cmd = %q", opts.Bins.Birdc+" -s "+opts.Socket+" configure")
		case "check_cmd":
			line = fmt.Sprintf("check_cmd = %q", opts.Bins.Bird+" -p -c {{.src}}")
		default:
			out = append(out, line)
			continue
		}
		seen[strings.TrimSpace(key)] = true
		out = append(out, line)
	}
	if !seen["dest"] || !seen["reload_cmd"] {
		return "", fmt.Errorf("no dest or reload_cmd to replace: %q", toml)
	}
	return strings.Join(out, "\n"), nil
}

// Start prepares (Prepare) and starts the node's confd. Its output goes to
// Log; it dies with the calling process.
func Start(opts Options) (*Confd, error) {
	c, err := Prepare(opts)
	if err != nil {
		return nil, err
	}
	return c, c.Start()
}

// Start starts a prepared confd that is not running.
func (c *Confd) Start() error {
	f, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(c.opts.Binary, "-confdir="+filepath.Join(c.opts.Dir, "confd"))
	cmd.Env = append(os.Environ(),
		"DATASTORE_TYPE=kubernetes",
		"KUBECONFIG="+c.opts.Kubeconfig,
		"NODENAME="+c.opts.NodeName,
		"CALICO_ENDPOINT_STATUS_PATH_PREFIX="+filepath.Join(c.opts.Dir, "confd", "status"),
		"CALICO_API_GROUP="+c.opts.APIGroup,
	)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("confdlab: start %s: %w", c.opts.Binary, err)
	}
	c.cmd, c.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.exited) }()
	return nil
}

// Running reports whether confd runs.
func (c *Confd) Running() bool {
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Stop kills confd (SIGKILL: as its node dies) and waits for it; the
// rendered files stay, as on a node's disk.
func (c *Confd) Stop() error {
	if c.cmd == nil {
		return nil
	}
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("confdlab: confd (pid %d) did not exit", c.cmd.Process.Pid)
		}
	}
	c.cmd = nil
	return nil
}

// Rendered returns the rendered bird.cfg, "" when there is none yet.
func (c *Confd) Rendered() string { return c.RenderedFile("bird.cfg") }

// RenderedFile returns one rendered file (bird.cfg, bird_aggr.cfg or
// bird_ipam.cfg), "" when there is none yet.
func (c *Confd) RenderedFile(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.opts.Dir, name))
	return string(data)
}

// RenderedFiles returns the three rendered files, each under its name,
// for a test's log.
func (c *Confd) RenderedFiles() string {
	var b strings.Builder
	for _, name := range templates {
		data, err := os.ReadFile(filepath.Join(c.opts.Dir, name+".cfg"))
		if err != nil {
			fmt.Fprintf(&b, "--- %s: %v\n", name+".cfg", err)
			continue
		}
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", name+".cfg", c.opts.NodeName, data)
	}
	return b.String()
}

// LogTail is the last n lines of confd's log.
func (c *Confd) LogTail(n int) string {
	data, _ := os.ReadFile(c.Log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitRendered waits until bird.cfg exists and its BGP neighbours are
// exactly peers (any order).
func (c *Confd) WaitRendered(ctx context.Context, timeout time.Duration, peers []netip.Addr) error {
	want := map[netip.Addr]bool{}
	for _, p := range peers {
		want[p] = true
	}
	return birdlab.Poll(ctx, 100*time.Millisecond, timeout, fmt.Sprintf("%s's confd renders neighbours %v", c.opts.NodeName, peers), func() (bool, string) {
		if !c.Running() {
			return false, "confd is not running; its log:\n" + c.LogTail(20)
		}
		cfg := c.Rendered()
		if cfg == "" {
			return false, "no bird.cfg yet; confd's log:\n" + c.LogTail(10)
		}
		got := Neighbours(cfg)
		if len(got) != len(want) {
			return false, fmt.Sprintf("neighbours %v", got)
		}
		for _, g := range got {
			if !want[g] {
				return false, fmt.Sprintf("neighbours %v", got)
			}
		}
		return true, ""
	})
}

var neighbourRE = regexp.MustCompile(`(?m)^\s*neighbor ([0-9a-fA-F.:]+)`)

// Neighbours lists the BGP neighbours of a rendered bird.cfg, in order.
func Neighbours(cfg string) []netip.Addr {
	var out []netip.Addr
	for _, m := range neighbourRE.FindAllStringSubmatch(cfg, -1) {
		if a, err := netip.ParseAddr(m[1]); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// ProtocolNames are the names confd gives a BGP peer at addr in bird.cfg:
// Mesh_ for the node-to-node mesh, Node_ for a BGPPeer with a node
// selector, Global_ for one without (bgp_processor.go). birdlab takes them
// to find a peer's session (birdlab.Options.ProtocolNames).
func ProtocolNames(addr netip.Addr) []string {
	ip := strings.NewReplacer(".", "_", ":", "_").Replace(addr.String())
	return []string{"Mesh_" + ip, "Node_" + ip, "Global_" + ip}
}
