// Package sandbox runs a real Kubernetes control plane on loopback, with no
// container engine: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler built from their upstream Go modules, and kwok standing in
// for the kubelets of many fake nodes.
//
// The controller-manager runs its real node lifecycle controller, so zone
// disruption and taint-based eviction behave exactly as in a production
// cluster; only the periods are configurable (see Timings).
package sandbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/pkg/zone"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

// Component names, as used in logs, errors and ExtraArgs.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kwok              = "kwok"
)

const stateFile = "state.json"

// Cluster is a running sandbox.
type Cluster struct {
	// Dir is the sandbox's folder; every component logs to Dir/logs.
	Dir string
	// Kubeconfig is an admin (system:masters) kubeconfig.
	Kubeconfig string
	// ReboundKubeconfig authenticates as ReboundUser, with no rights of
	// its own (see ReboundUser).
	ReboundKubeconfig string
	// APIServerURL is the apiserver's https URL on loopback.
	APIServerURL string
	// EtcdURL is etcd's client URL on loopback (plain http), e.g. for a
	// snapshot (see Backup).
	EtcdURL string
	// NodeNames are the fake nodes, in order.
	NodeNames []string
	// ZoneKey is the node lifecycle controller's key of the one zone
	// every node is in (see zone.ZoneKey).
	ZoneKey string
	Timings Timings
	// Kubernetes is the release the apiserver reports (e.g. v1.36.3).
	Kubernetes string

	Config *rest.Config
	Client kubernetes.Interface

	processes []*process // in start order
}

// state is what `sandbox up` leaves behind for `down` and `status`.
type state struct {
	Kubeconfig   string     `json:"kubeconfig"`
	APIServerURL string     `json:"apiServerURL"`
	EtcdURL      string     `json:"etcdURL,omitempty"`
	NodeNames    []string   `json:"nodeNames"`
	ZoneKey      string     `json:"zoneKey"`
	Kubernetes   string     `json:"kubernetes,omitempty"`
	Timings      Timings    `json:"timings"`
	Processes    []*process `json:"processes"`
	Started      time.Time  `json:"started"`
}

// Start brings up a sandbox and waits until every node is Ready. On error
// it stops whatever it had started.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if st, err := loadState(dir); err == nil && st.anyAlive() {
		return nil, fmt.Errorf("sandbox: %s already runs a sandbox (apiserver %s); run `rebound sandbox down --dir %s` first", dir, st.APIServerURL, dir)
	}
	for _, sub := range []string{"logs", "pki", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	c := &Cluster{Dir: dir, Timings: opts.Timings, ZoneKey: zone.ZoneKey(opts.Region, opts.Zone)}
	started := false
	defer func() {
		if !started {
			_ = c.Stop()
		}
	}()
	progress := progressf(opts.Progress)
	t0 := time.Now()

	var pk *pki
	if opts.restore != nil {
		// Restored service-account tokens stay valid only with the same
		// CA and signing key (see restore.go).
		pk, err = loadPKI(filepath.Join(dir, "pki"))
	} else {
		pk, err = newPKI(filepath.Join(dir, "pki"), t0)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: certificates: %w", err)
	}

	if err := c.startEtcd(ctx, opts, progress); err != nil {
		return nil, err
	}
	kubeconfigs, err := c.startAPIServer(ctx, opts, pk, progress)
	if err != nil {
		return nil, err
	}
	if err := c.readVersion(opts.Binaries); err != nil {
		return nil, err
	}
	if opts.restore != nil {
		if err := c.setRestoredHeartbeats(ctx, opts.restore); err != nil {
			return nil, err
		}
	}
	if err := c.startControllerManager(ctx, opts, pk, kubeconfigs, progress); err != nil {
		return nil, err
	}
	if err := c.startScheduler(ctx, opts, kubeconfigs, progress); err != nil {
		return nil, err
	}
	if err := c.startKwok(ctx, opts, kubeconfigs, progress); err != nil {
		return nil, err
	}

	if err := c.saveState(t0); err != nil {
		return nil, err
	}
	if opts.restore != nil {
		err = c.waitRestoredNodes(ctx, opts.restore, t0)
	} else {
		err = c.createNodes(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	progress("  %d nodes Ready in %s", opts.Nodes, time.Since(t0).Round(100*time.Millisecond))
	if err := c.saveState(t0); err != nil {
		return nil, err
	}
	started = true
	return c, nil
}

// readVersion records the release the apiserver reports and checks it is
// the one its binaries were built as, so a run on an older release (make
// test-versions) cannot silently run on the default one.
func (c *Cluster) readVersion(b Binaries) error {
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("sandbox: read the apiserver's version: %w", err)
	}
	c.Kubernetes = v.GitVersion
	if b.Kubernetes != "" && v.GitVersion != b.Kubernetes {
		return fmt.Errorf("sandbox: the apiserver in %s reports Kubernetes %s, but it was built as %s: remove that folder and build again", b.Dir, v.GitVersion, b.Kubernetes)
	}
	return nil
}

// bindRetries is how many times a component is started again on new ports
// when a port that was free a moment earlier was taken before it bound.
const bindRetries = 3

// run starts one component on nports loopback ports that were free a moment
// ago and waits until probe passes. command builds the flags and the probe
// for the ports it is given. Another process (a parallel test's agent, say)
// can take such a port between the check and the component's bind; the
// component then exits during start-up saying so, and run starts it again
// on new ports rather than failing the sandbox.
func (c *Cluster) run(ctx context.Context, opts Options, name, bin string, nports int, timeout time.Duration, command func(ports []int) (args []string, probe func(context.Context) error)) error {
	for attempt := 1; ; attempt++ {
		ports := make([]int, nports)
		for i := range ports {
			port, err := freePort()
			if err != nil {
				return err
			}
			ports[i] = port
		}
		args, probe := command(ports)
		args = append(args, opts.ExtraArgs[name]...)
		p, err := startProcess(name, bin, args, filepath.Join(c.Dir, "logs", name+".log"), opts.Detached)
		if err != nil {
			return err
		}
		err = p.waitHealthy(ctx, timeout, probe)
		var ce *ComponentError
		if err != nil && attempt < bindRetries && errors.As(err, &ce) && ce.exited && strings.Contains(ce.LogTail, "address already in use") {
			continue
		}
		c.processes = append(c.processes, p)
		return err
	}
}

// Stop stops every component, newest first, and waits for each to exit.
// It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.processes) - 1; i >= 0; i-- {
		if err := c.processes[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.processes = nil
	if len(errs) == 0 {
		_ = os.Remove(filepath.Join(c.Dir, stateFile))
	}
	return errors.Join(errs...)
}

// LogPath returns the log file of a component.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, "logs", component+".log")
}

func (c *Cluster) saveState(started time.Time) error {
	st := state{
		Kubeconfig:   c.Kubeconfig,
		APIServerURL: c.APIServerURL,
		EtcdURL:      c.EtcdURL,
		NodeNames:    c.NodeNames,
		ZoneKey:      c.ZoneKey,
		Kubernetes:   c.Kubernetes,
		Timings:      c.Timings,
		Processes:    c.processes,
		Started:      started,
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.Dir, stateFile))
}

func loadState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("sandbox: %s is corrupt: %w", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

func (st *state) anyAlive() bool {
	for _, p := range st.Processes {
		if pidAlive(p.PID, p.Bin) {
			return true
		}
	}
	return false
}

// Attach connects to a sandbox that `rebound sandbox up` left running in
// dir.
func Attach(dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := loadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no sandbox in %s: start one with `rebound sandbox up --dir %s`", dir, dir)
	}
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Kubeconfig: st.Kubeconfig, ReboundKubeconfig: filepath.Join(dir, "rebound.kubeconfig"), APIServerURL: st.APIServerURL, EtcdURL: st.EtcdURL, NodeNames: st.NodeNames, ZoneKey: st.ZoneKey, Kubernetes: st.Kubernetes, Timings: st.Timings, processes: st.Processes}
	if c.Config, err = restConfig(c.Kubeconfig); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// ComponentStatus is one process of a sandbox as `sandbox status` shows it.
type ComponentStatus struct {
	Name    string `json:"name"`
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Log     string `json:"log"`
	// RSSMiB and PeakRSSMiB are the resident memory now and at its peak.
	RSSMiB     float64 `json:"rssMiB"`
	PeakRSSMiB float64 `json:"peakRssMiB"`
}

// Components lists the sandbox's processes and whether each still runs.
func (c *Cluster) Components() []ComponentStatus {
	out := make([]ComponentStatus, 0, len(c.processes))
	for _, p := range c.processes {
		gone, _ := p.exitedEarly()
		st := ComponentStatus{Name: p.Name, PID: p.PID, Running: !gone, Log: p.Log}
		if !gone {
			rss, peak := memoryKiB(p.PID)
			st.RSSMiB, st.PeakRSSMiB = float64(rss)/1024, float64(peak)/1024
		}
		out = append(out, st)
	}
	return out
}
