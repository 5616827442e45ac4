package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"rebound/internal/agent/feeder"
	"rebound/internal/agent/gossip"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/kube"
	"rebound/pkg/unreachable"
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
	lister     listersv1.ConfigMapNamespaceLister
	retryDelay time.Duration
	lastReport *peering.Report // last one written
	// Failed report writes back off like reloads (RetryInterval doubled up
	// to MaxRetryInterval), so an apiserver outage costs a request and a
	// log line every 30 s per node, not every poll.
	reportFailures int
	reportRetryAt  time.Time
	refused        string // why the current document was refused, logged once
	// starting: BIRD is not running or in graceful-restart recovery, so
	// the start rule (peering.StartPeers) picks the peers; see start.go.
	starting bool
	// rejoiner is the whole agent with RejoinOnly (rejoin.go).
	rejoiner *Rejoiner
	// untainter runs beside the gossip member (untaint.go); nil without
	// gossip or with UntaintAfter 0.
	untainter *Untainter
	// gossipKeys are read at New; the member reads the file again every
	// --gossip-key-reload-interval.
	gossipKeys [][]byte

	mu      sync.Mutex // guards what the HTTP handlers and Stats read
	stats   Stats
	peers   []bird.Peer      // the set as last applied or attempted
	doc     *peering.PeerSet // the document peers came from
	status  *sessionView     // last read of BIRD
	gossip  *gossip.Member   // once started
	feeder  *feeder.Feeder   // once started, when it fences
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
	// Reports is how many session reports were written.
	Reports int
	// Refused counts published sets the agent would not apply (empty,
	// below their floor, unreadable); LastRefusal says why. The last good
	// file stays.
	Refused     int
	LastRefusal string
	// Generation is the published set's generation last applied.
	Generation int64
	// LastError is the last failure, "" after a success.
	LastError string
	// LastSync is when BIRD last had the current set (Reloaded or
	// Unchanged), for /metrics.
	LastSync time.Time
}

// New checks the options and builds an agent.
func New(opts Options) (*Agent, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("rebound agent: %w", err)
	}
	a := &Agent{
		opts:     opts,
		log:      opts.Logger.With("node", opts.NodeName),
		clock:    opts.Clock,
		trigger:  make(chan struct{}, 1),
		starting: true,
	}
	if opts.RejoinOnly {
		a.rejoiner = NewRejoiner(opts)
	}
	if opts.gossipOn() {
		keys, err := gossip.LoadKeys(opts.Gossip.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("rebound agent: %w", err)
		}
		a.gossipKeys = keys
		if opts.UntaintAfter > 0 {
			a.untainter = NewUntainter(opts)
		}
	}
	return a, nil
}

// Untainter is the agent's untainter, nil unless it gossips with
// UntaintAfter set.
func (a *Agent) Untainter() *Untainter { return a.untainter }

// startUntaint runs the untainter, if any, until ctx ends or stop is
// called. Where gossip runs rebound's taint can be put on nodes: the
// agent that helps put it on is the one that takes it off when no
// controller does.
func (a *Agent) startUntaint(ctx context.Context) (stop func()) {
	if a.untainter == nil {
		return func() {}
	}
	uctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.untainter.Run(uctx); err != nil {
			a.log.Error("the removal of a leftover "+unreachable.TaintKey+" taint does not run", "error", err)
		}
	}()
	return func() { cancel(); <-done }
}

// Rejoiner is the agent's rejoiner, nil unless RejoinOnly.
func (a *Agent) Rejoiner() *Rejoiner { return a.rejoiner }

// Run works until ctx ends: it resolves the node's address, starts the
// watch on the published set, and then reacts to changes of the set, to
// the debounce and retry timers and to the status ticker. It returns nil
// when ctx ends and an error only for what it cannot work without. With
// Once, everything is bounded by OnceTimeout (see runOnce).
func (a *Agent) Run(ctx context.Context) error {
	a.started = a.clock.Now()
	if a.rejoiner != nil {
		return a.rejoiner.Run(ctx)
	}
	if a.opts.Once {
		return a.runOnce(ctx)
	}
	if a.opts.GossipOnly {
		return a.runGossipOnly(ctx)
	}
	if err := a.prepare(ctx); err != nil {
		return err
	}
	if a.opts.gossipOn() {
		// Beside BIRD: on the BGP address unless told otherwise, the one
		// the other agents know this node by.
		stopGossip, err := a.startGossip(ctx, a.syncer.base.Address)
		if err != nil {
			return err
		}
		defer stopGossip()
		defer a.startUntaint(ctx)()
	}
	stop, err := a.watchSet(ctx)
	if stop != nil {
		defer stop()
	}
	if err != nil || ctx.Err() != nil {
		return err
	}
	a.setRunning()
	a.kick()
	return a.loop(ctx)
}

// runGossipOnly is --gossip-only: the gossip member and its writer, on
// --gossip-bind-address, else --address, else the node's BGP address.
func (a *Agent) runGossipOnly(ctx context.Context) error {
	addr := a.opts.Gossip.BindAddress
	if !addr.IsValid() {
		addr = a.opts.Address
	}
	if !addr.IsValid() {
		var err error
		if addr, err = a.ownAddress(ctx, "--gossip-bind-address"); err != nil {
			return err
		}
	}
	m, book, err := a.newGossip(ctx, addr)
	if err != nil {
		return err
	}
	if a.opts.fencingOn() {
		stopFencing, err := a.startFencing(ctx, addr, book)
		if err != nil {
			return err
		}
		defer stopFencing()
	}
	defer a.startUntaint(ctx)()
	a.setRunning()
	return m.Run(ctx)
}

// startGossip runs the gossip member beside the BIRD loops, on
// --gossip-bind-address or else addr. stop makes it leave the gossip and
// waits for it.
func (a *Agent) startGossip(ctx context.Context, addr netip.Addr) (stop func(), err error) {
	if a.opts.Gossip.BindAddress.IsValid() {
		addr = a.opts.Gossip.BindAddress
	}
	gctx, cancel := context.WithCancel(ctx)
	m, book, err := a.newGossip(gctx, addr)
	if err != nil {
		cancel()
		return nil, err
	}
	stopFencing := func() {}
	if a.opts.fencingOn() {
		if stopFencing, err = a.startFencing(gctx, addr, book); err != nil {
			cancel()
			return nil, err
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(gctx)
	}()
	return func() { stopFencing(); cancel(); <-done }, nil
}

// newGossip reads the address book from the API (its informers run until
// ctx ends) and, once it has listed, creates the member: before that the
// book knows nobody, and the member would refuse every other.
func (a *Agent) newGossip(ctx context.Context, addr netip.Addr) (*gossip.Member, *APIBook, error) {
	g := a.opts.Gossip
	book := NewAPIBook(a.opts.Client, g.Namespace, g.Service, g.Port, a.log)
	a.log.Info("gossip: reading the members' addresses from the API", "service", g.Service, "namespace", g.Namespace)
	if err := book.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("rebound agent: %w (the agent lists Nodes and the EndpointSlices of --gossip-service %s in --gossip-namespace %s)", err, g.Service, g.Namespace)
	}
	if _, ok := book.Member(a.opts.NodeName); !ok {
		a.log.Warn("gossip: the API lists no member on this node yet; the others refuse this member until it does", "service", g.Service, "namespace", g.Namespace)
	}
	leases, err := NewLeaseWatch(a.opts.Client, nil)
	if err == nil {
		err = leases.Start(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rebound agent: %w (the agent lists and watches the Leases in %s to witness the nodes whose Lease goes stale)", err, NodeLeaseNamespace)
	}
	m, err := gossip.New(a.opts.gossipConfig(addr, a.gossipKeys, book, leases))
	if err != nil {
		return nil, nil, fmt.Errorf("rebound agent: %w", err)
	}
	a.mu.Lock()
	a.gossip = m
	a.mu.Unlock()
	return m, book, nil
}

// Gossip is the agent's gossip member, nil until it started (and without
// --gossip-key-file).
func (a *Agent) Gossip() *gossip.Member {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gossip
}

// prepare resolves this node's address (from its Node unless given) and
// builds the syncer.
func (a *Agent) prepare(ctx context.Context) error {
	base := a.opts.meshBase()
	if !base.Address.IsValid() {
		addr, err := a.ownAddress(ctx, "--address")
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
		"peerSet", a.opts.PeerSet.String(), "gracefulRestartTime", base.GracefulRestartTime, "gracefulRestartWait", base.GracefulRestartWait)
	return nil
}

// watchSet starts the informer on the ONE published ConfigMap (a field
// selector on its name: RBAC grants get/list/watch on that name only) and
// waits for it to sync. stop ends the watch.
func (a *Agent) watchSet(ctx context.Context) (stop func(), err error) {
	factory := informers.NewSharedInformerFactoryWithOptions(a.opts.Client, 0,
		informers.WithNamespace(a.opts.PeerSet.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.PeerSet.Name).String()
		}))
	inf := factory.Core().V1().ConfigMaps()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.kick() },
		DeleteFunc: func(any) { a.kick() },
		UpdateFunc: func(any, any) { a.kick() },
	}); err != nil {
		return nil, err
	}
	a.lister = inf.Lister().ConfigMaps(a.opts.PeerSet.Namespace)
	// Shutdown waits for the informers, which stop when their context
	// ends: cancel before Shutdown.
	ictx, cancel := context.WithCancel(ctx)
	stop = func() { cancel(); factory.Shutdown() }
	factory.Start(ictx.Done())
	for typ, ok := range factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return stop, nil
			}
			return stop, fmt.Errorf("rebound agent: cache of %v did not sync", typ)
		}
	}
	return stop, nil
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
	peers, doc, refusal := a.desiredPeers(ctx)
	if refusal != "" {
		// Retrying cannot help until the document changes (a watch event).
		a.noteRefusal(refusal)
		return true
	}
	a.refused = ""
	outcome, err := a.syncer.Sync(ctx, peers)
	a.mu.Lock()
	a.peers, a.doc = peers, doc
	a.stats.Generation = doc.Generation
	a.stats.Syncs++
	switch outcome {
	case Reloaded:
		a.stats.Reloads++
		a.stats.LastSync = a.clock.Now()
	case Unchanged:
		a.stats.Unchanged++
		a.stats.LastSync = a.clock.Now()
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
		a.log.Info("BIRD reconfigured", "generation", doc.Generation, "peers", names, "file", a.syncer.Path())
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

// runOnce is --once: one sync, everything within OnceTimeout. Success is
// a reload, an unchanged file, or a file staged for BIRD's start. When the
// API server cannot be reached in time, or the set is refused, the last
// good file stays and runOnce returns nil if there is one: BIRD then
// starts with the set it had, which is never worse than not starting.
func (a *Agent) runOnce(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, a.opts.OnceTimeout)
	defer cancel()
	keep := func(why error) error {
		if _, err := os.Stat(a.opts.MeshPath); err == nil {
			a.log.Warn("--once: keeping the last good file", "file", a.opts.MeshPath, "why", why.Error())
			return nil
		}
		return fmt.Errorf("rebound agent --once: %w, and there is no earlier %s to keep", why, a.opts.MeshPath)
	}
	if err := a.prepare(ctx); err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			return keep(fmt.Errorf("no answer from the API server within --once-timeout %s: %w", a.opts.OnceTimeout, err))
		}
		return err
	}
	stop, err := a.watchSet(ctx)
	if stop != nil {
		defer stop()
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		if parent.Err() != nil {
			return nil
		}
		return keep(fmt.Errorf("the published set %s did not arrive within --once-timeout %s", a.opts.PeerSet, a.opts.OnceTimeout))
	}
	a.setRunning()
	peers, doc, refusal := a.desiredPeers(ctx)
	if refusal != "" {
		a.noteRefusal(refusal)
		return keep(errors.New(refusal))
	}
	outcome, err := a.syncer.Sync(ctx, peers)
	a.mu.Lock()
	a.peers, a.doc = peers, doc
	a.stats.Generation = doc.Generation
	a.stats.Syncs++
	a.mu.Unlock()
	switch outcome {
	case Reloaded, Unchanged, Staged:
		a.log.Info("peer set applied once", "outcome", outcome, "generation", doc.Generation, "peers", peerNames(peers), "detail", fmt.Sprint(err))
		return nil
	}
	return fmt.Errorf("rebound agent --once: %s: %w", outcome, err)
}

// desiredPeers is what to render now: the published set, or, while BIRD
// starts, the start rule's part of it (start.go).
func (a *Agent) desiredPeers(ctx context.Context) ([]bird.Peer, *peering.PeerSet, string) {
	peers, doc, refusal := a.currentPeers()
	if refusal != "" {
		return nil, nil, refusal
	}
	if a.starting && !a.opts.Once && !a.birdStarting(ctx) {
		a.starting = false
	}
	if !a.starting {
		return peers, doc, ""
	}
	start := peering.StartPeers(a.startView(ctx, doc, peers))
	if len(start) < len(peers) {
		a.log.Info("BIRD is starting: peers without evidence of life left out until its recovery ends",
			"start", peerNames(start), "set", peerNames(peers))
	}
	return start, doc, ""
}

// currentPeers reads the published set from the informer's cache and
// returns what to render: every member but this node, each with the
// address and port the controller resolved. refusal, when not empty, says
// why the document must not be applied (none, unreadable, empty, below
// its floor); the caller keeps the last good file. Members that cannot be
// rendered together (a repeated address, this node's own address) are
// skipped with a warning, never fail the render.
func (a *Agent) currentPeers() (peers []bird.Peer, doc *peering.PeerSet, refusal string) {
	cm, err := a.lister.Get(a.opts.PeerSet.Name)
	if err != nil {
		return nil, nil, fmt.Sprintf("no published peer set %s (%v): is `rebound controller --peering` running?", a.opts.PeerSet, err)
	}
	set, err := kube.PeerSetFromConfigMap(cm)
	if err != nil {
		return nil, nil, err.Error()
	}
	if reason := Refusal(set); reason != "" {
		return nil, nil, reason
	}
	own := a.syncer.base.Address
	seen := map[netip.Addr]string{}
	for _, p := range set.Peers {
		if p.Name == a.opts.NodeName {
			continue
		}
		if p.Address == own {
			a.log.Warn("peer has this node's own address, skipped", "peer", p.Name, "address", p.Address)
			continue
		}
		if other, dup := seen[p.Address]; dup {
			a.log.Warn("two peers share one address, the second is skipped", "peer", p.Name, "other", other, "address", p.Address)
			continue
		}
		seen[p.Address] = p.Name
		peers = append(peers, bird.Peer{Name: p.Name, Address: p.Address, Port: p.Port})
	}
	slices.SortFunc(peers, func(x, y bird.Peer) int { return x.Address.Compare(y.Address) })
	a.mu.Lock()
	had := len(a.peers)
	a.mu.Unlock()
	if len(peers) == 0 && had > 0 {
		// The agent is the last guard: whatever the controller publishes
		// (a bug, a lost state, a sequence its rules missed), a node that
		// had BGP peers is never left with none; a one-member set is one
		// only in a one-node cluster, where there was never a peer.
		return nil, nil, fmt.Sprintf("published peer set generation %d leaves this node no BGP peer (the last applied set had %d): refusing to leave BIRD without peers", set.Generation, had)
	}
	return peers, &set, ""
}

// Refusal says why an agent must not apply a published set, "" when it
// may: an empty set would leave BIRD without peers (the collapse of issue
// 9), and a set below the floor published with it is not one the
// controller stands behind.
func Refusal(set peering.PeerSet) string {
	switch {
	case len(set.Peers) == 0:
		return fmt.Sprintf("published peer set generation %d is empty: refusing to leave BIRD without peers", set.Generation)
	case len(set.Peers) < set.Floor:
		return fmt.Sprintf("published peer set generation %d has %d members, below its floor %d", set.Generation, len(set.Peers), set.Floor)
	}
	return ""
}

// noteRefusal counts and logs (once per reason) a set that is not applied.
func (a *Agent) noteRefusal(why string) {
	a.mu.Lock()
	a.stats.Refused++
	a.stats.LastRefusal = why
	a.mu.Unlock()
	if why != a.refused {
		a.log.Warn("published peer set not applied, last good configuration kept", "why", why)
		a.refused = why
	}
}

// poll reads BIRD's sessions, keeps them for /readyz and reports them when
// they changed or the last report is getting old.
func (a *Agent) poll(ctx context.Context) {
	a.mu.Lock()
	peers, doc, synced := a.peers, a.doc, a.stats.Syncs > 0
	a.mu.Unlock()
	if !synced || doc == nil {
		return // the set is not known to BIRD yet: nothing to say
	}
	if a.starting && !a.birdStarting(ctx) {
		// BIRD's recovery is over: render the whole set from now on.
		a.starting = false
		a.kick()
	}
	now := a.clock.Now()
	report, ss, err := ReadReport(ctx, a.opts.Control, a.opts.NodeName, peers, doc, now)
	// Peers dial the port the controller publishes for this node: the
	// report tells it where this BIRD listens.
	report.ListenPort = a.opts.ListenPort
	if err != nil {
		a.log.Debug("BIRD partly unreadable", "error", err)
	}
	view := viewOf(ss, nil)
	view.unexpected = unexpectedPeers(doc)
	if report.Error != "" {
		view = &sessionView{err: report.Error}
	}
	a.mu.Lock()
	a.status = view
	a.beat = now
	a.mu.Unlock()

	if a.opts.Reports == nil {
		return
	}
	if a.lastReport != nil && a.lastReport.SameContent(report) && now.Sub(a.lastReport.ObservedAt) < a.opts.ReportInterval {
		return
	}
	if now.Before(a.reportRetryAt) {
		return
	}
	if err := a.opts.Reports.WriteReport(ctx, report); err != nil {
		delay := a.opts.RetryInterval << min(a.reportFailures, 16)
		delay = min(delay, a.opts.MaxRetryInterval)
		a.reportFailures++
		a.reportRetryAt = now.Add(delay)
		a.log.Error("report sessions to the API server", "error", err, "failures", a.reportFailures, "retryIn", delay)
		return
	}
	if a.reportFailures > 0 {
		a.log.Info("reporting sessions again", "failedAttempts", a.reportFailures)
		a.reportFailures, a.reportRetryAt = 0, time.Time{}
	}
	a.lastReport = &report
	a.mu.Lock()
	a.stats.Reports++
	a.mu.Unlock()
}

// ownAddress reads this node's BGP address from its Node object, retrying
// until it is there or ctx ends. flag is the one that would set it.
func (a *Agent) ownAddress(ctx context.Context, flag string) (netip.Addr, error) {
	delay := a.opts.RetryInterval
	for {
		n, err := a.opts.Client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
		switch {
		case err == nil && kube.BGPAddress(n).IsValid():
			return kube.BGPAddress(n), nil
		case err == nil:
			err = fmt.Errorf("node %s has no IPv4 BGP address (annotation %s or an InternalIP); set %s", a.opts.NodeName, peering.AnnotationCalicoIPv4, flag)
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

// Handler serves the kubelet's probes, plain HTTP without authentication:
// /readyz (see readiness; 200 or 503 with the reason) and /healthz (200
// while the work loop is alive, 500 when it has not moved for three status
// intervals and half a minute). /metrics is served apart, authenticated
// (Collector).
func (a *Agent) Handler() http.Handler {
	if a.rejoiner != nil {
		return a.rejoiner.Handler()
	}
	if a.opts.GossipOnly {
		return a.gossipHandler()
	}
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

// gossipHandler serves the probes of a --gossip-only agent: /readyz once
// the member is up (whether or not it has reached another yet: the first
// agent of a cluster has nobody to reach, and a readiness gated on a join
// would keep every agent out of a Service that publishes ready endpoints
// only), /healthz while its watch loop moves.
func (a *Agent) gossipHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		m := a.Gossip()
		if m == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: the gossip member has not started (resolving this node's address, or listing the members' addresses from the API)")
			return
		}
		st := m.Status()
		switch {
		case !st.Running:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: the gossip member is not running")
		case !st.Joined:
			fmt.Fprintf(w, "ready: gossip member up, no other member reached yet (--gossip-join %s)\n", strings.Join(a.opts.Gossip.Join, ","))
		case st.LastWriteError != "":
			fmt.Fprintf(w, "ready: gossip member of %d; last write failed: %s\n", st.Members, st.LastWriteError)
		default:
			fmt.Fprintf(w, "ready: gossip member of %d\n", st.Members)
		}
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if m := a.Gossip(); m != nil {
			st := m.Status()
			if since := time.Since(st.Beat); st.Running && since > 30*time.Second { // the member runs on the real clock
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprintf(w, "stuck: the gossip watch loop has not moved for %s\n", since.Round(time.Second))
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// GossipCollector reads the gossip member's metrics at scrape time;
// nothing until the member started.
func (a *Agent) GossipCollector() prometheus.Collector { return gossipCollector{a} }

type gossipCollector struct{ a *Agent }

func (c gossipCollector) Describe(ch chan<- *prometheus.Desc) { gossip.DescribeMetrics(ch) }

func (c gossipCollector) Collect(ch chan<- prometheus.Metric) {
	if m := c.a.Gossip(); m != nil {
		m.Collect(ch)
	}
}

func peerNames(peers []bird.Peer) []string {
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	return names
}
