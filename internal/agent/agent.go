package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/kube"
)

// Agent is one node's agent. Create it with New, run it with Run, and
// serve Handler for the probes.
type Agent struct {
	opts  Options
	log   *slog.Logger
	clock clock.WithTicker

	trigger chan struct{}
	started time.Time

	// Owned by the Run goroutine.
	syncer     *Syncer
	lister     listersv1.NodeLister
	retryDelay time.Duration
	lastReport *peering.SessionReport // last one written to the Node
	warned     map[string]bool        // peers without an address, logged once
	// starting: BIRD is not running or in graceful-restart recovery, so
	// the start rule (StartPeers) picks the peers; see start.go.
	starting bool

	mu      sync.Mutex // guards what the HTTP handlers and Stats read
	stats   Stats
	peers   []bird.Peer            // the set as last applied or attempted
	status  *peering.SessionReport // last read of BIRD
	running bool
	beat    time.Time // last loop activity
}

// Stats count what the agent did; tests and the e2e scenarios read them.
type Stats struct {
	// Syncs is how many times the set was rendered after a change.
	Syncs int
	// Reloads is how many times BIRD was reconfigured successfully.
	Reloads int
	// Unchanged counts renders that matched what BIRD already had.
	Unchanged int
	// Rejected and Unreachable count failed reloads; Staged counts the
	// unreachable ones whose file passed BIRD's parser and stayed.
	Rejected    int
	Unreachable int
	Staged      int
	// Reports is how many session reports were written to the Node.
	Reports int
	// LastError is the last failure, "" after a success.
	LastError string
}

// New checks the options and builds an agent.
func New(opts Options) (*Agent, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("rebound agent: %w", err)
	}
	return &Agent{
		opts:     opts,
		log:      opts.Logger.With("node", opts.NodeName),
		clock:    opts.Clock,
		trigger:  make(chan struct{}, 1),
		warned:   map[string]bool{},
		starting: true,
	}, nil
}

// Run works until ctx ends: it resolves the node's address, starts the
// watch on the set, and then reacts to changes of the set, to the
// debounce and retry timers and to the status ticker. It returns nil when
// ctx ends and an error only for what it cannot work without.
func (a *Agent) Run(ctx context.Context) error {
	a.started = a.clock.Now()
	base := a.opts.meshBase()
	if !base.Address.IsValid() {
		addr, err := a.ownAddress(ctx)
		if err != nil {
			return err
		}
		base.Address = addr
	}
	syncer, err := NewSyncer(a.opts.MeshPath, a.opts.Control, base)
	if err != nil {
		return fmt.Errorf("rebound agent: %w", err)
	}
	if a.opts.BirdBinary != "" {
		syncer.SetCheck(ParseCheck(a.opts.BirdBinary, a.opts.BirdConfig))
	}
	a.syncer = syncer
	a.log.Info("agent starting", "address", base.Address, "mesh", a.opts.MeshPath, "socket", a.opts.Socket, "bird", a.opts.Version,
		"gracefulRestartTime", base.GracefulRestartTime, "gracefulRestartWait", base.GracefulRestartWait)

	factory := informers.NewSharedInformerFactoryWithOptions(a.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = peering.LabelInSet + "=true" }))
	inf := factory.Core().V1().Nodes()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.kick() },
		DeleteFunc: func(any) { a.kick() },
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*corev1.Node), newObj.(*corev1.Node)
			if kube.InSet(o) != kube.InSet(n) || kube.BGPAddress(o) != kube.BGPAddress(n) || kube.BGPPort(o) != kube.BGPPort(n) {
				a.kick()
			}
		},
	}); err != nil {
		return err
	}
	a.lister = inf.Lister()
	// Shutdown waits for the informers, which stop when their context
	// ends: cancel (deferred last, so run first) before Shutdown.
	defer factory.Shutdown()
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ictx.Done())
	for typ, ok := range factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("rebound agent: cache of %v did not sync", typ)
		}
	}
	a.setRunning()
	if a.opts.Once {
		return a.syncOnce(ctx)
	}
	a.kick()
	return a.loop(ctx)
}

// loop is the agent's one goroutine of work. Changes of the set start a
// debounce timer that later changes do not extend, so a reload follows the
// first change within Debounce whatever keeps changing.
func (a *Agent) loop(ctx context.Context) error {
	ticker := a.clock.NewTicker(a.opts.StatusInterval)
	defer ticker.Stop()
	var debounce, retry clock.Timer
	stop := func(t clock.Timer) {
		if t != nil {
			t.Stop()
		}
	}
	defer func() { stop(debounce); stop(retry) }()
	timerC := func(t clock.Timer) <-chan time.Time {
		if t == nil {
			return nil
		}
		return t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.trigger:
			if debounce == nil {
				debounce = a.clock.NewTimer(a.opts.Debounce)
			}
		case <-timerC(debounce):
			debounce = nil
			stop(retry)
			retry = nil
			if !a.sync(ctx) {
				retry = a.clock.NewTimer(a.nextRetry())
			}
		case <-timerC(retry):
			retry = nil
			if !a.sync(ctx) {
				retry = a.clock.NewTimer(a.nextRetry())
			}
		case <-ticker.C():
			a.poll(ctx)
		}
	}
}

func (a *Agent) kick() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

func (a *Agent) nextRetry() time.Duration {
	if a.retryDelay == 0 {
		a.retryDelay = a.opts.RetryInterval
	} else {
		a.retryDelay = min(2*a.retryDelay, a.opts.MaxRetryInterval)
	}
	return a.retryDelay
}

// sync applies the current set; false asks for a retry.
func (a *Agent) sync(ctx context.Context) bool {
	peers := a.desiredPeers(ctx)
	outcome, err := a.syncer.Sync(ctx, peers)
	a.mu.Lock()
	a.peers = peers
	a.stats.Syncs++
	switch outcome {
	case Reloaded:
		a.stats.Reloads++
	case Unchanged:
		a.stats.Unchanged++
	case Rejected:
		a.stats.Rejected++
	case Unreachable:
		a.stats.Unreachable++
	case Staged:
		a.stats.Unreachable++
		a.stats.Staged++
	}
	if err != nil {
		a.stats.LastError = err.Error()
	} else {
		a.stats.LastError = ""
	}
	a.beat = a.clock.Now()
	a.mu.Unlock()

	names := peerNames(peers)
	switch outcome {
	case Reloaded:
		a.retryDelay = 0
		a.log.Info("BIRD reconfigured", "peers", names, "file", a.syncer.Path())
		a.poll(ctx) // report the new sessions without waiting for the ticker
		return true
	case Unchanged:
		a.retryDelay = 0
		a.log.Debug("peer set unchanged, no reload", "peers", names)
		return true
	case Invalid:
		// Retrying cannot help until the set changes.
		a.log.Error("cannot render the peer set", "error", err)
		return true
	}
	a.log.Error("BIRD reload failed, last good configuration kept", "outcome", outcome, "peers", names, "error", err)
	return false
}

// syncOnce is --once: one sync; success is a reload, an unchanged file,
// or a file staged for BIRD's start.
func (a *Agent) syncOnce(ctx context.Context) error {
	peers := a.desiredPeers(ctx)
	outcome, err := a.syncer.Sync(ctx, peers)
	a.mu.Lock()
	a.peers = peers
	a.stats.Syncs++
	a.mu.Unlock()
	switch outcome {
	case Reloaded, Unchanged, Staged:
		a.log.Info("peer set applied once", "outcome", outcome, "peers", peerNames(peers), "detail", fmt.Sprint(err))
		return nil
	}
	return fmt.Errorf("rebound agent --once: %s: %w", outcome, err)
}

// desiredPeers is what to render now: the published set, or, while BIRD
// starts, the start rule's part of it.
func (a *Agent) desiredPeers(ctx context.Context) []bird.Peer {
	nodes, err := a.lister.List(labels.Everything())
	if err != nil {
		a.log.Error("list the peer set from the cache", "error", err)
		return nil
	}
	peers := a.setPeers(nodes)
	if a.starting && !a.opts.Once && !a.birdStarting(ctx) {
		a.starting = false
	}
	if !a.starting {
		return peers
	}
	start := StartPeers(a.startView(ctx, nodes, peers, a.clock.Now()))
	if len(start) < len(peers) {
		a.log.Info("BIRD is starting: peers without evidence of life left out until its recovery ends",
			"start", peerNames(start), "set", peerNames(peers))
	}
	return start
}

// setPeers lists the set from the informer's cache, without this node.
func (a *Agent) setPeers(nodes []*corev1.Node) []bird.Peer {
	peers := make([]bird.Peer, 0, len(nodes))
	for _, n := range nodes {
		if n.Name == a.opts.NodeName || !kube.InSet(n) {
			continue // the selector already filters; this guards against a lagging watch
		}
		addr := kube.BGPAddress(n)
		if !addr.IsValid() {
			if !a.warned[n.Name] {
				a.warned[n.Name] = true
				a.log.Warn("node in the peer set has no IPv4 BGP address (projectcalico.org/IPv4Address or InternalIP), skipped", "peer", n.Name)
			}
			continue
		}
		delete(a.warned, n.Name)
		peers = append(peers, bird.Peer{Name: n.Name, Address: addr, Port: kube.BGPPort(n)})
	}
	slices.SortFunc(peers, func(x, y bird.Peer) int { return x.Address.Compare(y.Address) })
	return peers
}

// poll reads BIRD's sessions, keeps them for /readyz and reports them when
// they changed or the last report is getting old.
func (a *Agent) poll(ctx context.Context) {
	a.mu.Lock()
	peers, synced := a.peers, a.stats.Syncs > 0
	a.mu.Unlock()
	if !synced {
		return // the set is not known to BIRD yet: nothing to say
	}
	if a.starting && !a.birdStarting(ctx) {
		// BIRD's recovery is over: render the whole set from now on.
		a.starting = false
		a.kick()
	}
	now := a.clock.Now()
	report := peering.SessionReport{Time: now}
	protos, err := a.opts.Control.Protocols(ctx)
	if err != nil {
		report.Error = err.Error()
	} else {
		report.Sessions = sessionStates(peers, protos)
	}
	a.mu.Lock()
	a.status = &report
	a.beat = now
	a.mu.Unlock()

	if a.lastReport != nil && a.lastReport.SameSessions(report) && now.Sub(a.lastReport.Time) < a.opts.ReportInterval {
		return
	}
	if err := a.writeReport(ctx, report); err != nil {
		a.log.Error("report sessions to the API server", "error", err)
		return
	}
	a.lastReport = &report
	a.mu.Lock()
	a.stats.Reports++
	a.mu.Unlock()
}

func (a *Agent) writeReport(ctx context.Context, r peering.SessionReport) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, peering.AnnotationSessions, r.Encode())
	_, err := a.opts.Client.CoreV1().Nodes().Patch(ctx, a.opts.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotate node %s with %s: %w", a.opts.NodeName, peering.AnnotationSessions, err)
	}
	return nil
}

// ownAddress reads this node's BGP address from its Node object, retrying
// until it is there or ctx ends.
func (a *Agent) ownAddress(ctx context.Context) (netip.Addr, error) {
	delay := a.opts.RetryInterval
	for {
		n, err := a.opts.Client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
		switch {
		case err == nil && kube.BGPAddress(n).IsValid():
			return kube.BGPAddress(n), nil
		case err == nil:
			err = fmt.Errorf("node %s has no IPv4 BGP address (annotation %s or an InternalIP); set --address", a.opts.NodeName, peering.AnnotationCalicoIPv4)
		case apierrors.IsNotFound(err):
			err = fmt.Errorf("node %s does not exist: check --node-name", a.opts.NodeName)
		}
		a.log.Error("cannot read this node's BGP address yet", "error", err)
		select {
		case <-ctx.Done():
			return netip.Addr{}, errors.Join(ctx.Err(), err)
		case <-a.clock.After(delay):
		}
		delay = min(2*delay, a.opts.MaxRetryInterval)
	}
}

func (a *Agent) setRunning() {
	a.mu.Lock()
	a.running = true
	a.beat = a.clock.Now()
	a.mu.Unlock()
}

// Stats returns a copy of the counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Readiness is what /readyz answers now.
func (a *Agent) Readiness() Readiness {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running || a.stats.Syncs == 0 {
		return Readiness{Reason: "starting: the peer set has not been applied yet"}
	}
	return readiness(a.status, a.clock.Since(a.started), a.opts.ReadyAfter)
}

// Handler serves /readyz (see readiness; 200 or 503 with the reason) and
// /healthz (200 while the work loop is alive, 500 when it has not moved
// for three status intervals and half a minute).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := a.Readiness()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", r.Reason)
			return
		}
		fmt.Fprintf(w, "ready: %s\n", r.Reason)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		running, beat := a.running, a.beat
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		limit := 3*a.opts.StatusInterval + 30*time.Second
		if running && a.clock.Since(beat) > limit {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "stuck: no work for %s\n", a.clock.Since(beat).Round(time.Second))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func peerNames(peers []bird.Peer) []string {
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	return names
}
