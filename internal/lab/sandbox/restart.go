package sandbox

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// This file lets a test break one component of a running sandbox and
// bring it back, as an operator's restart or a crash would: the fault
// tests (test/e2e/fault_*_test.go) restart etcd and the apiserver in the
// middle of a rescue, or keep the apiserver away for minutes.

func (c *Cluster) component(name string) (int, *process, error) {
	for i, p := range c.processes {
		if p.Name == name {
			return i, p, nil
		}
	}
	names := make([]string, 0, len(c.processes))
	for _, p := range c.processes {
		names = append(names, p.Name)
	}
	return 0, nil, fmt.Errorf("sandbox: no component %q (components are %s)", name, strings.Join(names, ", "))
}

// StopComponent stops one component: SIGTERM, then SIGKILL after grace.
// With grace 0 it is killed at once, as by a crash. The others go on
// running; StartComponent brings it back.
func (c *Cluster) StopComponent(name string, grace time.Duration) error {
	_, p, err := c.component(name)
	if err != nil {
		return err
	}
	if grace == 0 {
		if gone, _ := p.exitedEarly(); !gone {
			if proc, err := os.FindProcess(p.PID); err == nil {
				_ = proc.Signal(syscall.SIGKILL)
			}
		}
		if !p.waitGone(10 * time.Second) {
			return fmt.Errorf("sandbox: %s (pid %d) did not exit after SIGKILL", name, p.PID)
		}
		return nil
	}
	return p.stop(grace)
}

// StartComponent starts a stopped component again with the flags it had,
// and waits until it serves (etcd, the apiserver) or has stayed up for two
// seconds (the others, which retry their connections by themselves).
func (c *Cluster) StartComponent(ctx context.Context, name string) error {
	i, old, err := c.component(name)
	if err != nil {
		return err
	}
	if gone, _ := old.exitedEarly(); !gone {
		return fmt.Errorf("sandbox: %s (pid %d) still runs; stop it first", name, old.PID)
	}
	p, err := startProcess(old.Name, old.Bin, old.Args, old.Log, old.cmd == nil)
	if err != nil {
		return err
	}
	c.processes[i] = p
	var probe func(context.Context) error
	switch name {
	case Etcd:
		probe = httpProbe(c.EtcdURL+"/health", nil)
	case APIServer:
		probe = func(ctx context.Context) error {
			return c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		}
	default:
		started := time.Now()
		probe = func(context.Context) error {
			if time.Since(started) < 2*time.Second {
				return fmt.Errorf("%s started %s ago", name, time.Since(started).Round(time.Millisecond))
			}
			return nil
		}
	}
	if err := p.waitHealthy(ctx, 90*time.Second, probe); err != nil {
		return err
	}
	return c.saveStateKeepingStart()
}

// RestartComponent stops a component (grace as in StopComponent) and
// starts it again.
func (c *Cluster) RestartComponent(ctx context.Context, name string, grace time.Duration) error {
	if err := c.StopComponent(name, grace); err != nil {
		return err
	}
	return c.StartComponent(ctx, name)
}

// saveStateKeepingStart rewrites the state file with the new PIDs, so that
// `sandbox down` stops the restarted process too.
func (c *Cluster) saveStateKeepingStart() error {
	started := time.Now()
	if st, err := loadState(c.Dir); err == nil {
		started = st.Started
	}
	return c.saveState(started)
}
