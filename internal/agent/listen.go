package agent

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Default listen addresses, a pair per mode. The agents that may share a
// host's network (the BIRD agent, a gossip-only member moved to the host
// network or run by hand, the Calico rejoin agent) each take their own
// ports by default, so that two on one host never collide.
const (
	// The BIRD agent (and --once, which runs before it on the same host).
	DefaultHealthAddr  = ":9810"
	DefaultMetricsAddr = ":9811"
	// --rejoin-only serves probes only.
	DefaultRejoinHealthAddr = ":9812"
	// --gossip-only.
	DefaultGossipHealthAddr  = ":9813"
	DefaultGossipMetricsAddr = ":9814"
)

// servesMetrics says whether the agent's mode serves /metrics at all:
// --once exits after one sync and --rejoin-only has nothing to count.
func (o Options) servesMetrics() bool { return !o.Once && !o.RejoinOnly }

// DefaultListen returns the default --health-addr and
// --metrics-bind-address of o's mode; metrics is "0" (none) for a mode that
// serves no metrics.
func (o Options) DefaultListen() (health, metrics string) {
	switch {
	case o.RejoinOnly:
		return DefaultRejoinHealthAddr, "0"
	case o.Once:
		return DefaultHealthAddr, "0"
	case o.GossipOnly:
		return DefaultGossipHealthAddr, DefaultGossipMetricsAddr
	}
	return DefaultHealthAddr, DefaultMetricsAddr
}

// CheckListen refuses a probe address and a metrics address on one port:
// the second server would fail to start, after the agent had begun.
func CheckListen(o Options, health, metrics string) error {
	if health == "" || !o.servesMetrics() || metrics == "" || metrics == "0" {
		return nil
	}
	hh, hp, err := net.SplitHostPort(health)
	if err != nil {
		return fmt.Errorf("--health-addr %q: want HOST:PORT or :PORT: %w", health, err)
	}
	mh, mp, err := net.SplitHostPort(metrics)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address %q: want HOST:PORT or :PORT: %w", metrics, err)
	}
	if hp == mp && (hh == mh || anyHost(hh) || anyHost(mh)) {
		return fmt.Errorf("--health-addr %s and --metrics-bind-address %s share a port: give one of them another", health, metrics)
	}
	return nil
}

func anyHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

// Listen opens the TCP address of the server that flag configures; when
// the port is taken, the error names the flag to change.
func Listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, ListenError(flag, addr, err)
	}
	return ln, nil
}

// ListenError is err, the failure to serve on addr, named by its flag and,
// when the port is taken, with what to do.
func ListenError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: %w: another process on this host listens there (another rebound agent on the host network? "+
			"by default the BIRD agent takes %s and %s, the rejoin agent %s, a gossip-only member %s and %s): set %s to a free address",
			flag, addr, err, DefaultHealthAddr, DefaultMetricsAddr, DefaultRejoinHealthAddr, DefaultGossipHealthAddr, DefaultGossipMetricsAddr, flag)
	}
	return fmt.Errorf("%s %s: %w", flag, addr, err)
}
