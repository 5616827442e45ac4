package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
)

// runUser runs the built binary as a user at a shell does: env is the whole
// environment besides PATH, with HOME an empty folder, so that neither the
// developer's ~/.kube/config nor a stray KUBECONFIG can make a test pass.
func runUser(ctx context.Context, t *testing.T, env []string, bin string, args ...string) cliRun {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	err := cmd.Run()
	r := cliRun{stdout: o.String(), stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// TestCLIKubeconfig runs the built rebound binary the ways a user reaches
// a cluster: --kubeconfig FILE, only KUBECONFIG=FILE, and --context, for
// diagnose and for the agent (which once read --kubeconfig as the API
// server's URL and, with only KUBECONFIG, fell back to in-cluster config).
func TestCLIKubeconfig(t *testing.T) {
	c := startSandbox(t, 3, sandbox.Timings{})
	ctx := testContext(t, 4*time.Minute)
	cl := newClient(t, c)
	bin := reboundBinary

	// diagnose reads the cluster (exit 0 or 1), and -o json carries the
	// sandbox's nodes: only a connection to this API server gives that.
	checkDiagnose := func(t *testing.T, r cliRun) {
		t.Helper()
		if r.code != 0 && r.code != 1 {
			t.Fatalf("exit code %d, want 0 or 1 (the cluster was read); stderr:\n%s", r.code, r.stderr)
		}
		var rep struct {
			Zones []struct {
				Total    int `json:"total"`
				Excluded int `json:"excluded"`
			} `json:"zones"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("-o json is not JSON: %v\n%s", err, r.stdout)
		}
		n := 0
		for _, z := range rep.Zones {
			n += z.Total + z.Excluded
		}
		if n != len(c.NodeNames) {
			t.Errorf("diagnose saw %d nodes, the sandbox has %d:\n%s", n, len(c.NodeNames), r.stdout)
		}
	}
	t.Run("diagnose --kubeconfig", func(t *testing.T) {
		checkDiagnose(t, runUser(ctx, t, nil, bin, "diagnose", "--kubeconfig", c.Kubeconfig, "-o", "json"))
	})
	t.Run("KUBECONFIG diagnose", func(t *testing.T) {
		checkDiagnose(t, runUser(ctx, t, []string{"KUBECONFIG=" + c.Kubeconfig}, bin, "diagnose", "-o", "json"))
	})
	t.Run("diagnose --context unknown", func(t *testing.T) {
		r := runUser(ctx, t, []string{"KUBECONFIG=" + c.Kubeconfig}, bin, "diagnose", "--context", "no-such-context")
		r.expect(t, "unknown context", 2, "no-such-context")
	})
	t.Run("diagnose without any kubeconfig", func(t *testing.T) {
		r := runUser(ctx, t, nil, bin, "diagnose")
		r.expect(t, "no kubeconfig", 2, "no Kubernetes API to talk to", "--kubeconfig")
	})
	t.Run("diagnose -o yaml", func(t *testing.T) {
		r := runUser(ctx, t, nil, bin, "diagnose", "--kubeconfig", c.Kubeconfig, "-o", "yaml")
		if (r.code != 0 && r.code != 1) || !strings.Contains(r.stdout, "schemaVersion: 1") {
			t.Errorf("exit %d, stdout %q, want YAML with schemaVersion: 1", r.code, r.stdout)
		}
	})

	// The agent: the controller's published peer set names the three
	// nodes, BIRD is down; --once with --bird-binary stages the mesh file
	// after bird -p accepts it. The file names the two other peers: the
	// agent read the set from this API.
	applyFiles(ctx, t, cl, false, repoPath("deploy/controller/namespace.yaml"))
	set := peering.PeerSet{Version: peering.PeerSetVersion, Generation: 1, PublishedAt: time.Now().UTC().Truncate(time.Second), Floor: len(c.NodeNames)}
	for i, name := range c.NodeNames {
		set.Peers = append(set.Peers, peering.PublishedPeer{Name: name, Address: netip.AddrFrom4([4]byte{127, 0, 10, byte(i + 1)}), Ready: true, Reason: peering.InReady})
	}
	if err := cl.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName},
		Data:       map[string]string{peering.PeerSetKey: set.Encode()},
	}); err != nil {
		t.Fatal(err)
	}
	agentRun := func(t *testing.T, env []string, flags ...string) {
		t.Helper()
		dir := t.TempDir()
		mesh := filepath.Join(dir, "mesh.conf")
		conf := filepath.Join(dir, "bird.conf")
		if err := os.WriteFile(conf, []byte("router id 127.0.0.1;\nprotocol device {}\ninclude \""+mesh+"\";\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"agent", "--once", "--node-name", c.NodeNames[0], "--as", "64512",
			"--mesh-file", mesh, "--bird-socket", filepath.Join(dir, "bird.ctl"),
			"--bird-binary", "/usr/sbin/bird", "--bird-config", conf, "--health-addr", "", "--log-format", "json"}, flags...)
		r := runUser(ctx, t, env, bin, args...)
		if r.code != 0 {
			t.Fatalf("agent --once: exit %d\nstderr:\n%s", r.code, r.stderr)
		}
		data, err := os.ReadFile(mesh)
		if err != nil {
			t.Fatalf("mesh file not written: %v\nstderr:\n%s", err, r.stderr)
		}
		for _, peer := range c.NodeNames[1:] {
			if !strings.Contains(string(data), strings.ReplaceAll(peer, "-", "_")) && !strings.Contains(string(data), peer) {
				t.Errorf("mesh file does not name peer %s:\n%s", peer, data)
			}
		}
		// Every stderr line is the structured logger's JSON, klog's too.
		for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			if line != "" && !json.Valid([]byte(line)) {
				t.Errorf("log line is not JSON (--log-format json): %q", line)
			}
		}
	}
	t.Run("agent --kubeconfig", func(t *testing.T) { agentRun(t, nil, "--kubeconfig", c.Kubeconfig) })
	t.Run("KUBECONFIG agent", func(t *testing.T) { agentRun(t, []string{"KUBECONFIG=" + c.Kubeconfig}) })
}
