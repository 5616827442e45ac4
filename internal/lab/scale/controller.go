package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
)

// BuildRebound builds `rebound` from the module the working directory is
// in, into dir, and returns the binary's path.
func BuildRebound(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "rebound")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "rebound/cmd/rebound")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build rebound: %w\n%s", err, out.String())
	}
	return bin, nil
}

// Install puts rebound's CRD and the controller's roles on the sandbox,
// bound to its rebound identity (sandbox.ReboundUser), so that a
// controller run with c.ReboundKubeconfig has exactly the rights it has in
// a cluster and its requests can be told apart in the audit log.
func Install(ctx context.Context, c *sandbox.Cluster) (client.Client, error) {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return nil, err
	}
	return cl, install.ControllerFor(ctx, cl, "rebound-scale", sandbox.ReboundUser)
}

// Controller is `rebound controller` running as its own process against a
// sandbox, as the rebound identity, with its metrics on a loopback port.
type Controller struct {
	PID        int
	Log        string
	MetricsURL string
	HealthURL  string

	cmd    *exec.Cmd
	exited chan struct{}
}

// StartController runs bin as `rebound controller` with the sandbox's
// rebound kubeconfig and extra args. Its log goes to c.Dir/logs/name.log.
// It dies with the calling process (PR_SET_PDEATHSIG).
func StartController(c *sandbox.Cluster, bin, name string, args ...string) (*Controller, error) {
	return StartControllerAs(c, c.ReboundKubeconfig, bin, name, args...)
}

// StartControllerAs is StartController with another kubeconfig.
func StartControllerAs(c *sandbox.Cluster, kubeconfig, bin, name string, args ...string) (*Controller, error) {
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	hport, err := freePort()
	if err != nil {
		return nil, err
	}
	log := filepath.Join(c.Dir, "logs", name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	full := append([]string{"controller",
		"--kubeconfig", kubeconfig,
		// Plain HTTP on loopback: the bench reads the metrics itself.
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(mport), "--metrics-insecure",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(hport),
	}, append(c.Timings.ReboundFlags(), args...)...)
	cmd := exec.Command(bin, full...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Controller{PID: cmd.Process.Pid, Log: log, cmd: cmd, exited: make(chan struct{}),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport),
		HealthURL:  fmt.Sprintf("http://127.0.0.1:%d", hport)}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// WaitReady waits until the controller's caches are synced (/readyz).
func (p *Controller) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("rebound controller exited; see %s", p.Log)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.HealthURL+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("rebound controller not ready within %s: %w (log %s)", timeout, err, p.Log)
	}
	return nil
}

// Signal sends sig (SIGKILL for a crash, SIGTERM for a clean stop) and
// waits for the process to exit.
func (p *Controller) Signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Wait waits until the process has ended.
func (p *Controller) Wait() { <-p.exited }

// Exited reports whether the process has ended.
func (p *Controller) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Triggers reads rebound_recovery_triggers_total by kind; empty when the
// metrics cannot be read.
func (p *Controller) Triggers(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, kind := range []string{"RecoveryPolicy", "Node", "Pod", "Namespace", "PersistentVolumeClaim", "ReplicaSet", "Deployment"} {
		if v, err := p.Metric(ctx, `rebound_recovery_triggers_total{kind="`+kind+`"}`); err == nil {
			out[kind] = v
		}
	}
	return out
}

// Metric reads one unlabelled series (or the sum over its labels) from the
// controller's /metrics, e.g. rebound_plan_duration_seconds_sum.
func (p *Controller) Metric(ctx context.Context, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.MetricsURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", series, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("no metric %s at %s", name, p.MetricsURL)
	}
	return sum, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
