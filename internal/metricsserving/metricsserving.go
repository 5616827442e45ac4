// Package metricsserving is how rebound's processes serve /metrics: the
// controller (through its manager) and the node agent use the same flags,
// defaults and serving rule.
//
// By default /metrics is HTTPS (a self-signed certificate unless --metrics-cert-dir
// holds tls.crt and tls.key) behind controller-runtime's authentication and
// authorization filter: every scrape carries a bearer token that a
// TokenReview accepts and a SubjectAccessReview allows to "get" the
// non-resource URL /metrics (ClusterRole rebound-metrics-reader). The
// metrics name nodes, zones, policies and BGP sessions, which not every pod
// of the cluster, nor everything on a node's network, should read; the
// agent serves them on the node's network (hostNetwork).
package metricsserving

import (
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Config is what the --metrics-* flags set.
type Config struct {
	// Addr is the listen address; "0" (or "") disables /metrics.
	Addr string
	// Insecure serves /metrics over plain HTTP to anyone.
	Insecure bool
	// CertDir holds tls.crt and tls.key, reloaded when they change;
	// empty means a self-signed certificate made at start.
	CertDir string
}

// AddFlags registers --metrics-bind-address (default addr),
// --metrics-insecure and --metrics-cert-dir.
func AddFlags(f *pflag.FlagSet, c *Config, addr string) {
	f.StringVar(&c.Addr, "metrics-bind-address", addr, "address of the Prometheus /metrics endpoint (0 disables it)")
	f.BoolVar(&c.Insecure, "metrics-insecure", false, "serve /metrics over plain HTTP without authentication (default: HTTPS; a scrape needs a token allowed to get /metrics, e.g. bound to ClusterRole rebound-metrics-reader)")
	f.StringVar(&c.CertDir, "metrics-cert-dir", "", "folder with tls.crt and tls.key for /metrics (default: a self-signed certificate made at start)")
}

// Enabled reports whether /metrics is served at all.
func (c Config) Enabled() bool { return c.Addr != "" && c.Addr != "0" }

// Options are controller-runtime's metrics server options for c. Passing
// the filter is what makes the server check tokens and RBAC; it needs
// create on tokenreviews and subjectaccessreviews (ClusterRole
// rebound-metrics-auth).
func (c Config) Options() metricsserver.Options {
	addr := c.Addr
	if !c.Enabled() {
		addr = "0"
	}
	if c.Insecure {
		return metricsserver.Options{BindAddress: addr}
	}
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		CertDir:        c.CertDir,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
	}
}

// NewServer is controller-runtime's metrics server for c, outside a
// manager (the agent has none): it serves controller-runtime's registry
// (sigs.k8s.io/controller-runtime/pkg/metrics.Registry) and checks scrapes
// with cfg's credential. Call it only when c is Enabled.
func (c Config) NewServer(cfg *rest.Config) (metricsserver.Server, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return metricsserver.NewServer(c.Options(), cfg, hc)
}
