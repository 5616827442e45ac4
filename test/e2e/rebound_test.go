package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
)

// reboundBinary is built once by TestMain: scenario tests run rebound as
// its own process against the sandbox, as an operator would.
var reboundBinary string

func buildRebound() (string, error) {
	dir, err := os.MkdirTemp("", "rebound-e2e-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rebound")
	cmd := exec.Command("go", "build", "-o", bin, "rebound/cmd/rebound")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build rebound: %w", err)
	}
	return bin, nil
}

// repoPath returns a path relative to the repository root.
func repoPath(rel string) string { return filepath.Join("..", "..", rel) }

// newClient is a controller-runtime client with admin rights, for test
// set-up and checks.
func newClient(t *testing.T, c *sandbox.Cluster) client.Client {
	t.Helper()
	cl, err := install.NewClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// applyFiles server-side applies every object of the YAML files, as
// `kubectl apply --server-side` would (install.Apply). With dryRun the
// apiserver validates and defaults everything but stores nothing.
func applyFiles(ctx context.Context, t *testing.T, cl client.Client, dryRun bool, files ...string) []*unstructured.Unstructured {
	t.Helper()
	var applied []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-e2e", DryRun: dryRun}, data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		applied = append(applied, objs...)
	}
	return applied
}

// installRebound applies the CRD, the RBAC and the namespace from deploy/,
// binds the controller's roles to the sandbox user "rebound" (the identity
// of c.ReboundKubeconfig, which has no other rights), and applies the
// policy files.
func installRebound(ctx context.Context, t *testing.T, c *sandbox.Cluster, policies ...string) client.Client {
	t.Helper()
	cl := newClient(t, c)
	if err := install.ControllerFor(ctx, cl, "rebound-e2e", sandbox.ReboundUser); err != nil {
		t.Fatal(err)
	}
	if len(policies) > 0 {
		applyFiles(ctx, t, cl, false, policies...)
	}
	return cl
}

func rbacFiles() []string {
	files, _ := filepath.Glob(repoPath("deploy/rbac/*.yaml"))
	var out []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			out = append(out, f)
		}
	}
	return out
}

func waitCRDEstablished(ctx context.Context, t *testing.T, cl client.Client, name string) {
	t.Helper()
	if err := install.WaitCRDEstablished(ctx, cl, name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// controllerProcess is `rebound controller` running against a sandbox.
type controllerProcess struct {
	cmd *exec.Cmd
	log string
}

// startController runs `rebound controller` with the sandbox's rebound
// identity. It is stopped when the test ends.
func startController(t *testing.T, c *sandbox.Cluster, args ...string) *controllerProcess {
	t.Helper()
	n := 0
	var log string
	for {
		log = filepath.Join(c.Dir, "logs", fmt.Sprintf("rebound-controller-%d.log", n))
		if _, err := os.Stat(log); errors.Is(err, os.ErrNotExist) {
			break
		}
		n++
	}
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	full := append([]string{"controller",
		"--kubeconfig", c.ReboundKubeconfig,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
		"--leader-elect",
	}, append(c.Timings.ReboundFlags(), args...)...)
	cmd := exec.Command(reboundBinary, full...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{cmd: cmd, log: log}
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("rebound controller log %s:\n%s", log, tail(log, 40))
		}
	})
	return p
}

// stop signals the controller and waits for it to exit.
func (p *controllerProcess) stop(sig syscall.Signal) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// podDeletesBy counts completed pod deletions in the apiserver's audit log,
// by user.
func podDeletesBy(t *testing.T, c *sandbox.Cluster, user string) []sandbox.AuditEvent {
	t.Helper()
	evs, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		return e.Verb == "delete" && e.ObjectRef.Resource == "pods" && e.User.Username == user && e.ResponseStatus.Code < 300
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
