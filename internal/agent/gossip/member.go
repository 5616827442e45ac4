// Package gossip is the agents' gossip plane: each `rebound agent` is a
// member of a SWIM membership of the cluster's agents (memberlist, the
// library MetalLB's speakers use), and writes what its OWN probes say of
// the few members it watches into its PeeringReport's gossip field.
//
// memberlist finds a dead member within seconds: every member probes one
// other every probe interval, asks a few others to probe it indirectly
// when it does not answer, suspects it, and declares it dead when the
// suspicion is not refuted in time. That verdict is then relayed to all.
// But relayed state is only hearsay: the key authenticates membership,
// not the sender, and any node holds the key, so any of them can
// broadcast any other's death, its departure, or its "return" at an
// address where nothing answers. So membership state only triggers
// probes, and the probes go to the addresses the API holds (AddressBook:
// the member pod's EndpointSlice entry, the Node's address and kubelet
// port), never to one relayed through the gossip; memberlist's alive
// delegate refuses a member the API does not list, or announced at
// another address.
//
// An agent writes, for each member it watches (liveness.Watched: the k
// members before it on the hash ring of the members it has seen): Alive
// when the membership has it alive or it answers a ping at the API's
// address; MemberDown when it does not but its host does (a TCP
// connection to the kubelet's port accepted or refused: a live kernel; a
// rollout, a crash, another key), which is no vote; Dead only when the
// member and its host are both silent; and nothing when it cannot tell
// (no address in the API). The rule is watch.go's. The controller counts
// a death when a quorum of the member's watchers say Dead, none says
// Alive, and the node's Lease is stale as well.
//
// Each member watches k others, so a death is written by k agents
// whatever the cluster's size, and nothing is written while nothing
// changes but a refresh every report interval. When the Lease plane
// loses nodes, a few agents that still reach the API witness each of
// them besides (witness.go), so that a node cut off from the API with
// its ring watchers is still read by someone who can write. A changed
// read is written at once, or a debounce after the previous write. The keyring is re-read
// from --gossip-key-file (keys.go), so that a key is rotated without a
// split.
package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"rebound/pkg/liveness"
)

// Member is this agent's member of the gossip. Create it with New (which
// binds its port), run it with Run.
type Member struct {
	cfg       Config
	log       *slog.Logger
	ml        *memberlist.Memberlist
	transport *countingTransport
	// prober makes the direct probes: ml, but for the tests of the rule.
	prober prober
	// book is the API's addresses; host probes the hosts.
	book AddressBook
	host HostProber
	// keyring is memberlist's, which reloadKeys changes in place.
	keyring *memberlist.Keyring
	// refused counts the alive delegate's refusals.
	refused refusals
	// learned: nodes whose member address the book learned, to join.
	learned chan string
	// recheck is how often a member the membership has dead is probed
	// again.
	recheck time.Duration

	kick      chan struct{} // a membership event: look now
	wantWrite chan struct{} // the read changed: write now

	// mu guards what follows. memberlist calls the event delegate with
	// its own node lock held, so mu is never held while calling into
	// memberlist: the two locks are always taken in that order.
	mu      sync.Mutex
	t       *tracker
	watches []liveness.Watch // the current read
	// rewrites counts the requests to write the read again though it
	// says the same (a loss of a node it has Alive: tracker.leasesSeen).
	rewrites uint64
	joined   bool // another member was reached once
	running  bool
	beat     time.Time // last loop activity
	stats    memberStats
	killed   bool // tests: stopped without leaving, as by SIGKILL

	bg sync.WaitGroup // reconnects in flight
}

type memberStats struct {
	probeFailures uint64 // direct probes of this agent that went unanswered
	departures    uint64 // members the membership declared dead or left
	writes        uint64
	writeFailures uint64
	lastWrite     time.Time
	lastWriteErr  string
}

// prober is this agent's direct line to one member: memberlist's Ping,
// one UDP ping to the member's address, answered only by a member of that
// name holding the key; and Join, a push/pull state exchange with it.
type prober interface {
	Ping(node string, addr net.Addr) (time.Duration, error)
	Join(addrs []string) (int, error)
}

// New checks cfg, binds the gossip port and starts the memberlist
// member. It joins nobody yet: Run does.
func New(cfg Config) (*Member, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	m := &Member{
		cfg:       cfg,
		log:       cfg.Logger.With("plane", "gossip"),
		recheck:   4 * cfg.ProbeInterval,
		kick:      make(chan struct{}, 1),
		wantWrite: make(chan struct{}, 1),
		t:         newTracker(cfg.Book, cfg.NodeName, cfg.Watchers, cfg.DeadRetention, 4*cfg.ProbeInterval),
		book:      cfg.Book,
		host:      cfg.HostProber,
		learned:   make(chan string, 256),
	}
	m.t.margin = cfg.LeaseMargin
	stdlog := newStdLogger(m.log)
	port := cfg.BindPort
	if cfg.anyPort {
		port = 0
	}
	tr, err := newCountingTransport(cfg.BindAddr.String(), port, stdlog, cfg.Cut)
	if err != nil {
		return nil, fmt.Errorf("gossip: --gossip-bind-address %s --gossip-port %d: %w (is another agent, or MetalLB's speaker, using the port? choose another --gossip-port, the same on every agent)", cfg.BindAddr, port, err)
	}
	m.transport = tr
	mc := memberlistConfig(cfg)
	mc.Transport = tr
	mc.BindPort, mc.AdvertisePort = tr.port(), tr.port()
	mc.Events = (*events)(m)
	mc.Alive = (*aliveDelegate)(m)
	mc.Logger = stdlog
	kr, err := memberlist.NewKeyring(cfg.Keys[1:], cfg.Keys[0])
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("gossip: --gossip-key-file: %w", err)
	}
	m.keyring, mc.Keyring = kr, kr
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("gossip: start memberlist on %s: %w", net.JoinHostPort(cfg.BindAddr.String(), strconv.Itoa(tr.port())), err)
	}
	m.ml, m.prober = ml, ml
	cfg.Book.Subscribe(m.bookLearned)
	return m, nil
}

// memberlistConfig is memberlist's LAN profile tuned for a verdict within
// seconds, with a per-agent cost that does not grow with the cluster's
// size (docs of each setting below; MeasureLoad measures both).
func memberlistConfig(cfg Config) *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	c.Name = cfg.NodeName
	c.BindAddr = cfg.BindAddr.String()
	c.AdvertiseAddr = cfg.BindAddr.String()
	// The keyring (New) encrypts with the primary and decrypts with any
	// key: members on the old and the new key see each other during a
	// rotation.
	c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	// Every member probes one other per interval: the probe traffic per
	// agent is a constant, a few hundred bytes a second.
	c.ProbeInterval = cfg.ProbeInterval
	c.ProbeTimeout = cfg.ProbeTimeout
	c.GossipInterval = cfg.GossipInterval
	// A suspected member is declared dead after SuspicionMult x
	// log10(members) probe intervals when another member confirms the
	// suspicion (1.5 s at 10 members, 4.5 s at 1,000), and after at most
	// SuspicionMaxTimeoutMult times that without confirmation.
	// memberlist's defaults (4 and 6) give up to 12 s at 10 members; 3 and
	// 2 keep the worst case at 3 s there and 9 s at 1,000. A false
	// suspicion stays cheap: the member refutes it when it hears of it,
	// and no agent votes without its own probes failing too.
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 2
	// Push/pull is memberlist's anti-entropy: a full state exchange with
	// one random member, O(members) bytes each way, that repairs what
	// gossip lost. memberlist stretches its interval only with log2 of the
	// cluster's size, so an agent's share would grow as members/log2
	// (measured at 60 s: 104 B/s per agent at 30 members, where probes
	// take 600). antiEntropy runs it instead, at an interval that grows
	// with the members: a constant cost per agent.
	c.PushPullInterval = 0
	// Dead members are still gossiped to for a minute, so that one
	// falsely declared dead hears it and refutes; past that, reconnect
	// brings back the ones a watcher still reaches.
	c.GossipToTheDeadTime = 60 * time.Second
	// A node recreated with its old name but a new address (a replaced
	// VM) must be able to take its name back once its old self is dead.
	c.DeadNodeReclaimTime = 30 * time.Second
	// Joins and fallback probes over TCP on a LAN: 10 s would only hold a
	// join behind one unreachable seed.
	c.TCPTimeout = 3 * time.Second
	// memberlist compresses every packet with a fresh LZW writer (a 64 KiB
	// table each). Measured at 30 members: probes and gossip do not
	// shrink (605 B/s per agent either way), push/pull does (104 to 34
	// B/s), a tenth of the total for 40% more CPU.
	c.EnableCompression = false
	return c
}

// aliveDelegate is memberlist's alive delegate: it refuses a member the
// API does not know, or announced at another address than the API's.
// memberlist calls it with its node lock held, for every alive message,
// gossiped or pushed: it only reads the book and counts.
//
// memberlist shows it no incarnation number, so a forged jump of
// incarnations (to make a member's own refutations look old) cannot be
// refused here. It no longer matters: whatever the membership believes
// of a member only triggers this agent's probes, and those go to the
// API's addresses, where the real member or its host answers.
type aliveDelegate Member

func (d *aliveDelegate) NotifyAlive(n *memberlist.Node) error {
	m := (*Member)(d)
	ip, _ := netip.AddrFromSlice(n.Addr)
	at := netip.AddrPortFrom(ip.Unmap(), n.Port)
	reason, want := refuseReason(m.book, m.cfg.NodeName, n.Name, at)
	if reason == "" {
		return nil
	}
	err := refusalError(reason, n.Name, at, want)
	if log, suppressed := m.refused.add(n.Name, reason, time.Now()); log {
		m.log.Warn("gossip: member refused: the API holds no such member at that address; it is not taken into the membership, and no probe goes there",
			"member", n.Name, "reason", reason, "error", err, "refusalsNotLogged", suppressed)
	}
	return err
}

// bookLearned: the book has a new or changed member address for node.
// A member refused earlier (its EndpointSlice entry came after its
// announcement) is taken in by a state exchange with it, at that address.
func (m *Member) bookLearned(node string) {
	if node == m.cfg.NodeName {
		return
	}
	select {
	case m.learned <- node:
	default:
		// Full: a burst (a rollout, the informers' first list). The
		// members in it still join through the seeds, and announce
		// themselves; the next anti-entropy exchange repairs the rest.
	}
}

// joinLearned makes the state exchanges bookLearned asks for, with the
// members the membership does not have alive at the book's address.
func (m *Member) joinLearned(ctx context.Context) {
	for {
		var node string
		select {
		case <-ctx.Done():
			return
		case node = <-m.learned:
		}
		addr, ok := m.book.Member(node)
		if !ok || m.aliveAt(node, addr) {
			continue
		}
		if _, err := m.prober.Join([]string{addr.String()}); err != nil {
			m.log.Debug("gossip: state exchange with a member the API just listed failed", "member", node, "address", addr, "error", err)
		}
	}
}

// aliveAt says whether the membership has node alive at addr.
func (m *Member) aliveAt(node string, addr netip.AddrPort) bool {
	if m.ml == nil {
		return false
	}
	for _, n := range m.ml.Members() {
		if n.Name == node {
			ip, _ := netip.AddrFromSlice(n.Addr)
			return n.State == memberlist.StateAlive && netip.AddrPortFrom(ip.Unmap(), n.Port) == addr
		}
	}
	return false
}

// events is memberlist's event delegate. memberlist calls it with its node
// lock held: it only records and wakes the loop.
type events Member

func nodeAddr(n *memberlist.Node) net.Addr {
	return &net.UDPAddr{IP: append(net.IP(nil), n.Addr...), Port: int(n.Port)}
}

func (e *events) NotifyJoin(n *memberlist.Node)   { (*Member)(e).membership(n, true) }
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Member)(e).membership(n, true) }
func (e *events) NotifyLeave(n *memberlist.Node)  { (*Member)(e).membership(n, false) }

func (m *Member) membership(n *memberlist.Node, alive bool) {
	if n.Name == m.cfg.NodeName {
		return
	}
	now := time.Now()
	m.mu.Lock()
	if alive {
		m.t.alive(n.Name, now)
	} else {
		m.t.dead(n.Name, now)
		m.stats.departures++
	}
	m.mu.Unlock()
	poke(m.kick)
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run joins the gossip (retrying with backoff until another member is
// reached, and again whenever this member finds itself alone), keeps the
// watch state and writes the read, until ctx ends; then it leaves the
// gossip and closes the port. It returns nil: nothing after New is fatal.
func (m *Member) Run(ctx context.Context) error {
	m.mu.Lock()
	m.running, m.beat = true, time.Now()
	m.mu.Unlock()
	m.log.Info("gossip member starting", "address", net.JoinHostPort(m.cfg.BindAddr.String(), strconv.Itoa(m.transport.port())),
		"join", m.cfg.Join, "watchers", m.cfg.Watchers, "probeInterval", m.cfg.ProbeInterval, "probeTimeout", m.cfg.ProbeTimeout)
	var wg sync.WaitGroup
	wg.Go(func() { m.joinLoop(ctx) })
	wg.Go(func() { m.antiEntropy(ctx) })
	wg.Go(func() { m.joinLearned(ctx) })
	if m.cfg.KeyFile != "" && m.cfg.KeyReloadInterval > 0 {
		wg.Go(func() { m.reloadKeys(ctx) })
	}
	if m.cfg.Writer != nil {
		wg.Go(func() { m.writeLoop(ctx) })
	}
	m.loop(ctx)
	wg.Wait()
	m.stop()
	return nil
}

// stop leaves the gossip, so that the others need not wait for a
// suspicion timeout, and closes the port.
func (m *Member) stop() {
	m.mu.Lock()
	killed := m.killed
	m.running = false
	m.mu.Unlock()
	m.bg.Wait()
	if !killed {
		if err := m.ml.Leave(2 * m.cfg.ProbeInterval); err != nil {
			m.log.Debug("gossip leave not confirmed", "error", err)
		}
	}
	_ = m.ml.Shutdown()
}

// kill stops the member without leaving, as SIGKILL or a power cut would:
// the others must find out by probing. Tests and MeasureLoad.
func (m *Member) kill() {
	m.mu.Lock()
	m.killed = true
	m.mu.Unlock()
	_ = m.ml.Shutdown()
}

// loop is the watch loop: on each membership event and every probe
// interval it recomputes the watch list, makes the direct probes due and
// publishes the read when it changed.
func (m *Member) loop(ctx context.Context) {
	tick := time.NewTicker(m.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		m.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-tick.C:
		}
	}
}

func (m *Member) step(ctx context.Context) {
	var leases map[string]liveness.Lease
	if m.cfg.Leases != nil {
		leases = m.cfg.Leases.Leases()
	}
	now := time.Now()
	m.mu.Lock()
	if m.killed {
		m.mu.Unlock()
		return
	}
	if m.cfg.Leases != nil {
		m.t.leasesSeen(leases, now)
	}
	m.t.update(now)
	targets := m.t.due(now)
	m.mu.Unlock()

	results, failures := m.probeAll(ctx, targets)

	now = time.Now()
	var reconnect []string
	m.mu.Lock()
	defer func() {
		m.mu.Unlock()
		m.reconnect(ctx, reconnect)
	}()
	m.stats.probeFailures += failures
	for i, p := range targets {
		if ctx.Err() != nil {
			break // a probe cut short by shutdown says nothing
		}
		if p.witness {
			m.logWitness(p, m.t.probedWitness(p.node, results[i], now))
			continue
		}
		switch m.t.probed(p.node, results[i], now) {
		case becameDead:
			m.log.Info("gossip: member dead: the membership has it dead, and neither it nor its host answered this agent's probes at the API's addresses", "member", p.node, "address", p.member, "host", p.host)
		case becameMemberDown:
			m.log.Info("gossip: member down, host alive: the member does not answer, its host does (no vote)", "member", p.node, "address", p.member, "host", p.host)
		case becameUnknown:
			m.log.Info("gossip: member silent and its host cannot be probed (no address in the API, or the probe said nothing): no vote", "member", p.node, "address", p.member, "host", p.host)
		case becameAlive:
			m.log.Info("gossip: member answers this agent's direct probes again", "member", p.node, "address", p.member)
			reconnect = append(reconnect, p.member.String())
		case contested:
			m.log.Warn("gossip: the membership has a member dead, but it answers this agent's direct probes: no Dead vote", "member", p.node, "address", p.member)
			reconnect = append(reconnect, p.member.String())
		}
	}
	m.beat = now
	if !m.joined && len(m.t.members) > 0 {
		// Another member reached this one, or this one it: from now on
		// there is something to report.
		m.joined = true
		poke(m.wantWrite)
	}
	if m.t.takeRewrite() {
		m.rewrites++
		poke(m.wantWrite)
	}
	if w := m.t.report(); !sameWatches(m.watches, w) {
		m.watches = w
		poke(m.wantWrite)
	}
}

// logWitness logs what a witness probe changed.
func (m *Member) logWitness(p probeTarget, o outcome) {
	switch o {
	case becameAlive:
		m.log.Info("gossip: witness: a node whose Lease is stale answers this agent's probes at the API's address", "node", p.node, "address", p.member)
	case becameMemberDown:
		m.log.Info("gossip: witness: a node whose Lease is stale does not answer, its host does", "node", p.node, "address", p.member, "host", p.host)
	case becameDead:
		m.log.Info("gossip: witness: a node whose Lease is stale is silent, and so is its host", "node", p.node, "address", p.member, "host", p.host)
	case becameUnknown:
		m.log.Info("gossip: witness: a node whose Lease is stale is silent and its host cannot be probed", "node", p.node, "address", p.member, "host", p.host)
	}
}

// reconnect exchanges state with members the membership has dead but
// that answer this agent: memberlist never looks again for a member once
// it has forgotten it (GossipToTheDeadTime after its death), so after a
// partition longer than that its two sides would stay apart. A push/pull
// between the two tells each of them it was declared dead, and each
// refutes. Once per episode: contested and becameAlive are.
func (m *Member) reconnect(ctx context.Context, addrs []string) {
	for _, a := range addrs {
		m.bg.Go(func() {
			if ctx.Err() != nil {
				return
			}
			if _, err := m.prober.Join([]string{a}); err != nil {
				m.log.Debug("gossip: state exchange with a member the membership has dead failed", "address", a, "error", err)
			}
		})
	}
}

// probeAll probes the targets in parallel, at the book's addresses;
// results[i] is targets[i]'s outcome, failures the unanswered pings. A
// confirmation pings the member DefaultProbeAttempts times, each within a
// probe timeout, so that one lost packet never makes a vote; only when
// all go unanswered is the host probed.
func (m *Member) probeAll(ctx context.Context, targets []probeTarget) (results []probeResult, failures uint64) {
	results = make([]probeResult, len(targets))
	var (
		wg     sync.WaitGroup
		failed atomic.Uint64
	)
	for i, p := range targets {
		wg.Go(func() {
			attempts := 1
			if p.confirm {
				attempts = DefaultProbeAttempts
			}
			for range attempts {
				if ctx.Err() != nil {
					results[i] = hostUnknown
					return
				}
				if _, err := m.prober.Ping(p.node, udpAddr(p.member)); err == nil {
					results[i] = memberAnswered
					return
				}
				failed.Add(1)
			}
			if !p.host.IsValid() {
				results[i] = hostUnknown
				return
			}
			switch m.host.ProbeHost(ctx, p.host) {
			case HostAnswers:
				results[i] = hostAnswered
			case HostSilent:
				results[i] = hostSilent
			default:
				results[i] = hostUnknown
			}
		})
	}
	wg.Wait()
	return results, failed.Load()
}

// reloadKeys re-reads --gossip-key-file every KeyReloadInterval and
// applies its keys to the keyring. A file that cannot be read or holds a
// bad line changes nothing: the keyring in use stays, and the error is
// logged once until it changes.
func (m *Member) reloadKeys(ctx context.Context) {
	tick := time.NewTicker(m.cfg.KeyReloadInterval)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		keys, err := LoadKeys(m.cfg.KeyFile)
		if err == nil {
			var changed bool
			if changed, err = applyKeys(m.keyring, keys); changed {
				m.log.Info("gossip: keyring changed from --gossip-key-file", "primary", keyID(keys[0]), "keys", keyIDs(keys))
			}
		}
		switch {
		case err != nil && err.Error() != lastErr:
			m.log.Error("gossip: keyring not reloaded; the keys in use stay", "error", err)
			lastErr = err.Error()
		case err == nil && lastErr != "":
			m.log.Info("gossip: keyring reloaded again")
			lastErr = ""
		}
	}
}

// Keys is the keyring in use, the primary first.
func (m *Member) Keys() [][]byte { return m.keyring.GetKeys() }

// joinLoop joins through the configured seeds until another member is
// reached, with backoff, and again whenever this member is alone (every
// other member declared dead: a partition, or the whole cluster
// restarted): memberlist itself never looks for members it has
// forgotten.
func (m *Member) joinLoop(ctx context.Context) {
	delay := m.cfg.RetryInterval
	attempts := 0
	for {
		wait := m.recheck
		if m.ml.NumMembers() <= 1 {
			attempts++
			n, err := m.join(ctx)
			switch {
			case n > 0:
				m.log.Info("gossip: joined", "members", m.ml.NumMembers(), "attempts", attempts)
				attempts, delay = 0, m.cfg.RetryInterval
			default:
				m.log.Warn("gossip: no other member reached yet, retrying", "join", m.cfg.Join, "attempt", attempts, "retryIn", delay, "error", err)
				wait = delay
				delay = min(2*delay, m.cfg.MaxRetryInterval)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// antiEntropyBase is the push/pull interval up to antiEntropyScale
// members, memberlist's own schedule up to its first stretch (32).
const (
	antiEntropyBase  = 60 * time.Second
	antiEntropyScale = 32
)

// antiEntropyInterval is the mean time between two push/pulls this member
// starts with n members: base up to 32, then growing with n, so that the
// O(n) bytes of each exchange cost every agent the same per second
// whatever the size (a full exchange every 31 min per agent at 1,000; with
// 1,000 agents exchanging, one happens every 2 s).
func antiEntropyInterval(n int) time.Duration {
	return time.Duration(float64(antiEntropyBase) * max(1, float64(n)/antiEntropyScale))
}

// antiEntropy exchanges the full state with one random live member at
// antiEntropyInterval, jittered (half to one and a half of it, and the
// first at any time within it) so that members started together do not
// exchange together. memberlist's Join is its push/pull with the given
// member.
func (m *Member) antiEntropy(ctx context.Context) {
	for first := true; ; first = false {
		d := antiEntropyInterval(m.ml.NumMembers())
		if first {
			d = rand.N(d)
		} else {
			d = d/2 + rand.N(d)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		var peers []*memberlist.Node
		for _, n := range m.ml.Members() {
			if n.Name != m.cfg.NodeName {
				peers = append(peers, n)
			}
		}
		if len(peers) == 0 {
			continue
		}
		p := peers[rand.N(len(peers))]
		if _, err := m.ml.Join([]string{nodeAddr(p).String()}); err != nil {
			m.log.Debug("gossip: push/pull failed", "member", p.Name, "error", err)
		}
	}
}

// join resolves the seeds and joins through a few of them at a time, in
// random order, until one answers. memberlist's Join would exchange the
// full state with every address a name resolves to: with a headless
// Service of 1,000 agents, a restart of all of them would cost a million
// exchanges. n is the number of other members reached.
func (m *Member) join(ctx context.Context) (int, error) {
	addrs, err := m.resolveSeeds(ctx)
	if len(addrs) == 0 {
		if err == nil {
			err = fmt.Errorf("--gossip-join %v: no address but this member's own", m.cfg.Join)
		}
		return 0, err
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	const batch = 3
	var lastErr error
	for i := 0; i < len(addrs) && ctx.Err() == nil; i += batch {
		if _, err := m.ml.Join(addrs[i:min(i+batch, len(addrs))]); err != nil {
			lastErr = err
		}
		if n := m.ml.NumMembers() - 1; n > 0 {
			return n, nil
		}
	}
	if lastErr == nil {
		lastErr = err
	}
	return 0, lastErr
}

// resolveSeeds turns --gossip-join into host:port addresses, this
// member's own left out.
func (m *Member) resolveSeeds(ctx context.Context) ([]string, error) {
	self := net.JoinHostPort(m.cfg.BindAddr.String(), strconv.Itoa(m.transport.port()))
	var (
		out     []string
		lastErr error
	)
	seen := map[string]bool{self: true}
	for _, s := range m.cfg.Join {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			host, port = s, strconv.Itoa(m.cfg.BindPort)
		}
		ips := []string{host}
		if net.ParseIP(host) == nil {
			rctx, cancel := context.WithTimeout(ctx, m.cfg.MaxRetryInterval/3)
			ips, err = net.DefaultResolver.LookupHost(rctx, host)
			cancel()
			if err != nil {
				lastErr = fmt.Errorf("--gossip-join %s: %w", s, err)
				continue
			}
		}
		for _, ip := range ips {
			if a := net.JoinHostPort(ip, port); !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out, lastErr
}

// writeLoop writes the read when it changed (writeDue), and refreshes it
// every ReportInterval so that the controller sees this watcher is alive.
// A change of the member count alone is never written: a death would
// otherwise be written by every agent instead of its k watchers. Nothing
// is written before another member was reached: a member alone watches
// nobody, and on the controller's ring it would take a watcher's seat.
// Failed writes are retried with backoff, always with the latest read.
func (m *Member) writeLoop(ctx context.Context) {
	var (
		lastAt   time.Time // the last write that succeeded
		last     []liveness.Watch
		lastRew  uint64
		failures int
		retryAt  time.Time
	)
	timer := time.NewTimer(m.cfg.ReportInterval)
	defer timer.Stop()
	for {
		m.mu.Lock()
		joined, watches, rewrites := m.joined, m.watches, m.rewrites
		m.mu.Unlock()
		now := time.Now()
		changed := !sameWatches(last, watches) || rewrites != lastRew
		write, next := writeDue(now, lastAt, changed, m.cfg.WriteDebounce, m.cfg.ReportInterval)
		if !joined {
			write, next = false, m.cfg.ReportInterval
		}
		if write && now.Before(retryAt) {
			write, next = false, retryAt.Sub(now)
		}
		if write {
			g := liveness.GossipReport{ObservedAt: now, Members: m.numMembers(), Watchers: m.cfg.Watchers, Watches: watches}
			err := m.cfg.Writer.WriteGossip(ctx, g)
			m.mu.Lock()
			if err != nil {
				m.stats.writeFailures++
				m.stats.lastWriteErr = err.Error()
			} else {
				m.stats.writes++
				m.stats.lastWrite, m.stats.lastWriteErr = now, ""
			}
			m.mu.Unlock()
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				delay := min(m.cfg.RetryInterval<<min(failures, 16), m.cfg.MaxRetryInterval)
				failures++
				retryAt = time.Now().Add(delay)
				next = delay
				m.log.Error("gossip: write the gossip read", "error", err, "failures", failures, "retryIn", delay)
			default:
				if failures > 0 {
					m.log.Info("gossip: writing the gossip read again", "failedAttempts", failures)
				}
				failures, retryAt, lastAt, last, lastRew = 0, time.Time{}, now, watches, rewrites
				_, next = writeDue(time.Now(), lastAt, false, m.cfg.WriteDebounce, m.cfg.ReportInterval)
			}
		}
		timer.Reset(max(next, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-m.wantWrite:
		case <-timer.C:
		}
	}
}

// writeDue says whether to write the read now, given when the last write
// succeeded (zero: never) and whether the read changed since; else how
// long until it is due. A change is written at once when the last write
// is at least debounce old, else debounce after it: one write per change,
// never one per probe, and a burst of changes costs at most one write per
// debounce. With no change, the read is refreshed every refresh.
func writeDue(now, last time.Time, changed bool, debounce, refresh time.Duration) (write bool, wait time.Duration) {
	if last.IsZero() {
		return true, 0
	}
	age := now.Sub(last)
	switch {
	case age >= refresh:
		return true, 0
	case changed && age >= debounce:
		return true, 0
	case changed:
		return false, debounce - age
	}
	return false, refresh - age
}

// numMembers is the membership's count, this member included.
func (m *Member) numMembers() int {
	if m.ml == nil {
		// The tests of the rule run no memberlist: the members seen
		// alive, and this one.
		m.mu.Lock()
		defer m.mu.Unlock()
		n := 1
		for _, v := range m.t.members {
			if v.alive {
				n++
			}
		}
		return n
	}
	return m.ml.NumMembers()
}

// Report is the current read, as the next write would carry it.
func (m *Member) Report() liveness.GossipReport {
	n := m.ml.NumMembers()
	m.mu.Lock()
	defer m.mu.Unlock()
	return liveness.GossipReport{ObservedAt: time.Now(), Members: n, Watchers: m.cfg.Watchers, Watches: m.watches}
}

// leaves is how many departures the membership announced so far.
func (m *Member) leaves() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats.departures
}

// Traffic is the gossip bytes this member sent and received so far.
func (m *Member) Traffic() TrafficStats { return m.transport.stats() }

// Port is the bound port.
func (m *Member) Port() int { return m.transport.port() }

// Addr is the bound (and advertised) address and port.
func (m *Member) Addr() netip.AddrPort {
	return netip.AddrPortFrom(m.cfg.BindAddr, uint16(m.transport.port()))
}

// Status is what the probes of a gossip-only agent read.
type Status struct {
	// Running: Run is working; Joined: another member was reached once.
	Running, Joined bool
	// Members alive in the membership, this one included.
	Members int
	// Beat is the watch loop's last activity.
	Beat time.Time
	// LastWriteError is why the last write failed, "" after a success.
	LastWriteError string
}

// Status reads the member's state.
func (m *Member) Status() Status {
	n := m.ml.NumMembers()
	m.mu.Lock()
	defer m.mu.Unlock()
	return Status{Running: m.running, Joined: m.joined, Members: n, Beat: m.beat, LastWriteError: m.stats.lastWriteErr}
}
