package diagnose

import (
	"context"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/pkg/peering"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// Exit codes of `rebound diagnose`.
const (
	// ExitOK: nothing blocks recovery (something may still be pending).
	ExitOK = 0
	// ExitBlocking: something blocks recovery (Report.Blocking).
	ExitBlocking = 1
	// ExitCannotRead: diagnose could not look at the cluster: the API
	// server is unreachable, the credentials are rejected, the rights are
	// too few, or the kubeconfig or a flag is wrong.
	ExitCannotRead = 2
)

// DefaultTimeout is the per-request timeout: an unreachable API server
// fails in seconds.
const DefaultTimeout = 10 * time.Second

// Options configure Run.
type Options struct {
	// Config is the API server and credentials to read with; the
	// command (internal/cli/diagnosecmd) builds it from kubectl's flags.
	Config *rest.Config
	// ZoneConfig is kube-controller-manager's node lifecycle flags; the
	// zero value means its defaults.
	ZoneConfig zone.Config
	// Defaults are the controller's own knobs (replacement timeout).
	Defaults rescue.Defaults
	// Peering is the peering controller's planner configuration (prune
	// grace period, the age past which agents' reports are stale).
	Peering peering.Config
	// Timeout bounds each request to the API server; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
}

// CannotRead wraps err as ExitCannotRead, with its message on one line.
func CannotRead(err error) error {
	return &Error{Code: ExitCannotRead, Msg: oneLine(err.Error()), Err: err}
}

// Run reads the cluster and explains it. It returns the report and the
// exit code: ExitOK or ExitBlocking with a nil error, or ExitCannotRead
// with an *Error whose message is one line.
func Run(ctx context.Context, opts Options) (Report, int, error) {
	opts.ZoneConfig = opts.ZoneConfig.WithDefaults()
	if err := opts.ZoneConfig.Validate(); err != nil {
		return Report{}, ExitCannotRead, CannotRead(err)
	}
	if err := opts.Peering.Validate(); err != nil {
		return Report{}, ExitCannotRead, CannotRead(err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Config == nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: "no Kubernetes API to talk to: Options.Config is not set"}
	}
	cfg := rest.CopyConfig(opts.Config)
	cfg.Timeout = opts.Timeout
	cfg.UserAgent = "rebound-diagnose"
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: "bad client configuration: " + oneLine(err.Error()), Err: err}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Report{}, ExitCannotRead, &Error{Code: ExitCannotRead, Msg: "bad client configuration: " + oneLine(err.Error()), Err: err}
	}

	snap, extra, err := Gather(ctx, Clients{Kube: kube, Dynamic: dyn, Host: cfg.Host, Timeout: opts.Timeout, Evidence: opts.Peering.WithDefaults().Evidence}, opts.Now())
	if err != nil {
		return Report{}, ExitCannotRead, err
	}
	snap.ZoneConfig = opts.ZoneConfig.WithDefaults()
	snap.Defaults = opts.Defaults.WithDefaults()
	extra.Peering = opts.Peering
	extra.SessionReportMaxAge = opts.Peering.Evidence.ReportMaxAge
	r := Explain(snap, extra)
	if r.Blocking {
		return r, ExitBlocking, nil
	}
	return r, ExitOK, nil
}
