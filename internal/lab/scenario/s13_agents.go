package scenario

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"rebound/internal/lab/sandbox"
)

// GossipAgentOptions say which nodes of a sandbox run a gossiping agent.
type GossipAgentOptions struct {
	// Binary is the rebound binary to run as `rebound agent --gossip-only`.
	Binary string
	// Only, when set, are the nodes that run one; empty means all.
	Only []string
	// WrongKey are nodes whose agent holds another key than the others.
	WrongKey []string
}

// GossipAgent is one `rebound agent --gossip-only` process.
type GossipAgent struct {
	Node, Address, Log string

	binary string
	args   []string
	cmd    *exec.Cmd
	done   chan struct{}
}

// start runs the agent, its output appended to Log.
func (a *GossipAgent) start() error {
	f, err := os.OpenFile(a.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(a.binary, a.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start the agent of %s: %w", a.Node, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	a.cmd, a.done = cmd, done
	return nil
}

// Restart starts the agent again after Kill or Stop, with the same
// flags and token, as a DaemonSet's pod starts again on its node.
func (a *GossipAgent) Restart() error {
	select {
	case <-a.done:
	default:
		return fmt.Errorf("the agent of %s still runs", a.Node)
	}
	return a.start()
}

// Kill kills the agent at once (SIGKILL): to the other members it is a
// node whose network went away, no goodbye.
func (a *GossipAgent) Kill() error {
	if err := a.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-a.done
	return nil
}

// Stop ends the agent gracefully (SIGTERM, SIGKILL after 15 s).
func (a *GossipAgent) Stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = a.Kill()
	}
}

// gossipNet numbers each sandbox's loopback network, so that agents of
// sandboxes run side by side gossip apart: 127.13.<n>.<i+1>.
var gossipNet atomic.Int32

// GossipPort is the port the sandbox's agents gossip on, each on its own
// loopback address.
const GossipPort = 7946

// StartGossipAgents installs the members' confinement (deploy/gossip) on
// c (the node-bound tokens need it) and starts one gossip-only agent per
// node, as the ServiceAccount of deploy/gossip's DaemonSet, each on its
// own loopback address with a token bound to its node, all joining each
// other, with a random key written to c.Dir. Stop them with StopAll.
func StartGossipAgents(ctx context.Context, c *sandbox.Cluster, opts GossipAgentOptions) (map[string]*GossipAgent, error) {
	if err := InstallGossipConfinement(ctx, c, "rebound-gossip"); err != nil {
		return nil, err
	}
	keyFile, err := writeGossipKey(filepath.Join(c.Dir, "gossip.key"))
	if err != nil {
		return nil, err
	}
	wrongFile, err := writeGossipKey(filepath.Join(c.Dir, "gossip-wrong.key"))
	if err != nil {
		return nil, err
	}
	nodes := opts.Only
	if len(nodes) == 0 {
		nodes = c.NodeNames
	}
	net := 100 + gossipNet.Add(1)%150
	addr := func(i int) string { return fmt.Sprintf("127.13.%d.%d", net, i+1) }
	var join []string
	for i := range nodes {
		join = append(join, fmt.Sprintf("%s:%d", addr(i), GossipPort))
	}
	agents := map[string]*GossipAgent{}
	for i, n := range nodes {
		token, err := GossipToken(ctx, c, n)
		if err != nil {
			StopAll(agents)
			return nil, err
		}
		kubeconfig := filepath.Join(c.Dir, "agent-"+n+".kubeconfig")
		if err := WriteTokenKubeconfig(c, token, kubeconfig); err != nil {
			StopAll(agents)
			return nil, err
		}
		key := keyFile
		if slices.Contains(opts.WrongKey, n) {
			key = wrongFile
		}
		a := &GossipAgent{Node: n, Address: addr(i), Log: filepath.Join(c.Dir, "logs", "rebound-agent-"+n+".log"), binary: opts.Binary,
			args: []string{"agent", "--gossip-only", "--node-name", n, "--kubeconfig", kubeconfig,
				"--gossip-key-file", key, "--gossip-bind-address", addr(i), "--gossip-port", fmt.Sprint(GossipPort),
				"--gossip-join", strings.Join(join, ","), "--health-addr", "", "--metrics-bind-address", "0"}}
		if err := a.start(); err != nil {
			StopAll(agents)
			return nil, err
		}
		agents[n] = a
	}
	return agents, nil
}

// StopAll stops every agent.
func StopAll(agents map[string]*GossipAgent) {
	for _, a := range agents {
		a.Stop()
	}
}

func writeGossipKey(path string) (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)), 0o600)
}
