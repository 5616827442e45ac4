package fencing_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"rebound/pkg/fencing"
)

// The model: N nodes, each a host (boot, watchdog, a stateful pod), a
// kubelet that renews its Lease, and an agent that runs fencing.Sanction;
// an API that stores Leases, boot IDs, reports, rounds, testimonies and
// taints; and a controller that runs one fencing.Fencer per node. Time
// moves in ticks; the network and the API's reachability change only at
// steps of T/3. Every clock is the machine's own, with an offset and a
// rate within fencing.ClockRateBound. The invariant, checked every tick:
// no node carries the out-of-service taint while a boot that runs its
// pods is alive (fed, or within W of its last keepalive, or paused).

const (
	modelTick          = fencing.DefaultSanctionWindow / 48
	modelStep          = fencing.DefaultSanctionWindow / 3
	modelRenewInterval = fencing.DefaultKubeletRenewInterval
	modelReboot        = 15 * time.Second
	modelWarmup        = 40 * time.Second
	// modelRenewingWithin: the controller counts a member's Lease as
	// renewing when it was renewed this recently.
	modelRenewingWithin = 15 * time.Second
)

// flaw breaks one part of the rules, to show that the model finds what
// the rules prevent. sound breaks nothing.
type flaw int

const (
	sound flaw = iota
	// noWait: the controller opens its round as soon as it has read the
	// Lease, without waiting out T + 2W.
	noWait
	// noBootCheck: the controller trusts an armed report whatever boot
	// it was written on.
	noBootCheck
	// noUptimeCap: a member that restarted testifies to silence from
	// before it started.
	noUptimeCap
	// longPause: nodes may be paused for longer than T + 2W, which the
	// rules cannot cover (a paused machine's watchdog is paused with it).
	longPause
)

func (f flaw) String() string {
	return [...]string{"sound", "noWait", "noBootCheck", "noUptimeCap", "longPause"}[f]
}

// topology is who reaches whom: reach[a][b] means a's packets arrive at b.
type topology struct {
	reach [][]bool
	api   []bool
}

func fullTopology(n int) topology {
	t := topology{reach: make([][]bool, n), api: make([]bool, n)}
	for i := range n {
		t.reach[i] = make([]bool, n)
		for j := range n {
			t.reach[i][j] = true
		}
		t.api[i] = true
	}
	return t
}

// groupTopology builds the topology of a partition into groups (group[i]
// is node i's group), with one one-way link from group from to group to
// (from < 0: none), and the API reachable from the nodes in apiMask.
func groupTopology(group []int, from, to int, apiMask int) topology {
	n := len(group)
	t := topology{reach: make([][]bool, n), api: make([]bool, n)}
	for i := range n {
		t.reach[i] = make([]bool, n)
		for j := range n {
			t.reach[i][j] = group[i] == group[j] || (group[i] == from && group[j] == to)
		}
		t.api[i] = apiMask&(1<<i) != 0
	}
	return t
}

// partitions returns every partition of n nodes into groups, as
// restricted growth strings.
func partitions(n int) [][]int {
	var out [][]int
	var rec func(prefix []int, maxG int)
	rec = func(prefix []int, maxG int) {
		if len(prefix) == n {
			out = append(out, slices.Clone(prefix))
			return
		}
		for g := 0; g <= maxG+1; g++ {
			rec(append(prefix, g), max(maxG, g))
		}
	}
	rec([]int{0}, 0)
	return out
}

// cuts returns every topology of n nodes: each partition, with no one-way
// link or with one between each ordered pair of groups, and each subset
// of nodes that reaches the API.
func cuts(n int) []topology {
	var out []topology
	for _, p := range partitions(n) {
		groups := slices.Max(p) + 1
		for apiMask := range 1 << n {
			out = append(out, groupTopology(p, -1, -1, apiMask))
			for a := range groups {
				for b := range groups {
					if a != b {
						out = append(out, groupTopology(p, a, b, apiMask))
					}
				}
			}
		}
	}
	return out
}

func randomTopology(r *rand.Rand, n int) topology {
	group := make([]int, n)
	groups := 1 + r.IntN(n)
	for i := range group {
		group[i] = r.IntN(groups)
	}
	from, to := -1, -1
	if groups > 1 && r.IntN(2) == 0 {
		from, to = r.IntN(groups), r.IntN(groups)
	}
	return groupTopology(group, from, to, r.IntN(1<<n))
}

type simNode struct {
	name string
	// The machine's boot clock: off + rate × real time. It runs while the
	// machine is paused (a VM's clock catches up on resume).
	off  time.Duration
	rate float64
	// wall is the kubelet's wall clock offset; steps change it.
	wall time.Duration

	up       bool // running (false while rebooting)
	upAt     time.Duration
	boot     int
	pausedTo time.Duration // paused while now < pausedTo
	pausedAt time.Duration

	wdArmed    bool
	wdDeadline time.Duration // real time of the reset, while armed
	resets     int

	kubeletUpAt time.Duration // the kubelet runs once now >= kubeletUpAt
	nextRenew   time.Duration

	agentUp    bool
	agentUpAt  time.Duration
	agentStart time.Duration // boot clock
	nextPoll   time.Duration // boot clock
	san        *fencing.Sanction
	list       fencing.List   // kept on the host
	lists      []fencing.List // what its next report names
	heard      map[string]time.Duration

	podBoot int // the boot running the node's stateful pod; 0: none
}

func (n *simNode) local(now time.Duration) time.Duration {
	return n.off + time.Duration(float64(now)*n.rate)
}

func (n *simNode) paused(now time.Duration) bool { return now < n.pausedTo }

// alive: a boot is running, paused or not.
func (n *simNode) alive() bool { return n.up }

func (n *simNode) bootID() string { return n.name + "-boot-" + strconv.Itoa(n.boot) }

type simLease struct {
	rv        int
	renewTime string
	renewedAt time.Duration
}

type simTaint struct {
	boot string
	at   time.Duration
}

type simAPI struct {
	lease    []simLease
	nodeBoot []string
	report   []*fencing.Report
	reportRV int
	list     fencing.List
	round    []string
	answers  []map[string]fencing.Testimony
	taint    []*simTaint
	podBound []bool
}

type sim struct {
	flaw  flaw
	r     *rand.Rand
	nodes []*simNode
	api   simAPI
	topo  topology
	now   time.Duration

	ctrlOff    time.Duration
	ctrlRate   float64
	fencers    []*fencing.Fencer
	alwaysDead bool
	lag        time.Duration
	deadAfter  time.Duration
	timing     fencing.Timing

	violations []string
	fenced     int
	states     map[uint64]struct{}
	// script, when set, replaces the random cuts and events: it is called
	// at every step of T/3 with the step's number.
	script func(s *sim, step int)
	// agentDelay is how long after a boot its agent starts (the kubelet
	// starts first, then the agent's pod).
	agentDelay func() time.Duration
}

func newSim(n int, seed uint64, f flaw, states map[uint64]struct{}) *sim {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &sim{flaw: f, r: r, topo: fullTopology(n), timing: fencing.DefaultTiming(), states: states}
	s.ctrlOff = time.Duration(r.Int64N(int64(time.Hour)))
	s.ctrlRate = rate(r)
	s.alwaysDead = r.IntN(2) == 0
	s.lag = time.Duration(r.Int64N(int64(3 * time.Second)))
	s.deadAfter = time.Duration(r.Int64N(int64(12 * time.Second)))
	s.agentDelay = func() time.Duration { return time.Duration(r.Int64N(int64(6 * time.Second))) }
	// The list starts without the last node when there are more than
	// three: it is the node added during an incident.
	members := make([]string, 0, n)
	for i := range n {
		if n > 3 && i == n-1 {
			continue
		}
		members = append(members, name(i))
	}
	s.api = simAPI{
		lease: make([]simLease, n), nodeBoot: make([]string, n), report: make([]*fencing.Report, n),
		list: fencing.List{Number: 1, Members: members}, round: make([]string, n),
		answers: make([]map[string]fencing.Testimony, n), taint: make([]*simTaint, n), podBound: make([]bool, n),
	}
	for i := range n {
		node := &simNode{name: name(i), off: time.Duration(r.Int64N(int64(24 * time.Hour))), rate: rate(r),
			wall: time.Duration(r.Int64N(int64(time.Minute))) - 30*time.Second, boot: 0}
		node.list = s.api.list
		s.nodes = append(s.nodes, node)
		s.api.podBound[i] = true
		s.api.answers[i] = map[string]fencing.Testimony{}
		opts := fencing.FencerOptions{}
		if f == noWait {
			opts.Margin = -s.timing.FenceWait(0) + time.Nanosecond
		}
		s.fencers = append(s.fencers, fencing.NewFencer(node.name, opts))
		s.startHost(i)
	}
	return s
}

func name(i int) string { return "node-" + strconv.Itoa(i) }

func rate(r *rand.Rand) float64 {
	return 1 + (2*r.Float64()-1)*fencing.ClockRateBound*0.99
}

func (s *sim) startHost(i int) {
	n := s.nodes[i]
	n.up = true
	n.boot++
	n.wdArmed = false
	n.kubeletUpAt = s.now
	n.nextRenew = s.now + time.Duration(s.r.Int64N(int64(modelRenewInterval)))
	if n.boot == 1 {
		s.startAgent(i)
		return
	}
	n.agentUp = false
	n.agentUpAt = s.now + s.agentDelay()
}

func (s *sim) startAgent(i int) {
	n := s.nodes[i]
	n.agentUp = true
	n.agentStart = n.local(s.now)
	n.nextPoll = n.agentStart + time.Duration(s.r.Int64N(int64(fencing.DefaultPollInterval)))
	n.san = fencing.NewSanction(n.name, s.timing, n.list)
	n.lists = []fencing.List{n.list}
	n.heard = map[string]time.Duration{}
}

// reset is the watchdog firing: the boot ends, and with it its pods.
func (s *sim) reset(i int) {
	n := s.nodes[i]
	n.up, n.agentUp, n.wdArmed = false, false, false
	n.upAt = s.now + modelReboot
	n.podBoot = 0
	n.resets++
}

func (s *sim) tick() {
	for i, n := range s.nodes {
		if !n.up {
			if n.upAt >= 0 && s.now >= n.upAt {
				s.startHost(i)
			}
			continue
		}
		if n.paused(s.now) {
			continue
		}
		if n.pausedAt > 0 {
			// Resumed: the watchdog's count was paused with the machine.
			n.wdDeadline += s.now - n.pausedAt
			n.pausedAt = 0
		}
		if n.wdArmed && s.now >= n.wdDeadline {
			s.reset(i)
			continue
		}
		if !n.agentUp && n.agentUpAt >= 0 && s.now >= n.agentUpAt {
			s.startAgent(i)
		}
	}
	for i := range s.nodes {
		s.kubelet(i)
	}
	for i := range s.nodes {
		s.agent(i)
	}
	s.controller()
	s.check()
}

func (s *sim) reachesAPI(i int) bool { return s.topo.api[i] }

func (s *sim) kubelet(i int) {
	n := s.nodes[i]
	if !n.up || n.paused(s.now) || s.now < n.kubeletUpAt || !s.reachesAPI(i) || s.now < n.nextRenew {
		return
	}
	l := &s.api.lease[i]
	l.rv++
	l.renewTime = strconv.FormatInt(int64((s.now+n.wall)/time.Microsecond), 10)
	l.renewedAt = s.now
	s.api.nodeBoot[i] = n.bootID()
	if s.api.podBound[i] && s.api.taint[i] == nil && n.podBoot == 0 {
		n.podBoot = n.boot
	}
	n.nextRenew = s.now + modelRenewInterval
}

func (s *sim) agent(i int) {
	n := s.nodes[i]
	if !n.up || !n.agentUp || n.paused(s.now) {
		return
	}
	local := n.local(s.now)
	if local >= n.nextPoll {
		n.nextPoll = local + fencing.DefaultPollInterval
		s.poll(i, local)
	}
	if !n.wdArmed && n.san.MayArm(local) {
		n.wdArmed = true
		n.wdDeadline = s.now + s.timing.Watchdog
	}
	if n.wdArmed && !n.san.PeersHold(local) && s.reachesAPI(i) && n.san.Sanctioned(local) {
		// The peers no longer hold: disarm while the API can see it.
		s.disarm(i, local)
	}
	if n.wdArmed && n.san.MayFeed(local) {
		n.wdDeadline = s.now + s.timing.Watchdog
	}
	if s.reachesAPI(i) {
		for x, id := range s.api.round {
			if id == "" || x == i {
				continue
			}
			s.api.answers[x][n.name] = fencing.Testimony{Member: n.name, Round: id, SilentFor: s.silentFor(n, s.nodes[x].name, local)}
		}
	}
}

func (s *sim) silentFor(n *simNode, peer string, local time.Duration) time.Duration {
	uptime := local - n.agentStart
	if at, ok := n.heard[peer]; ok {
		return min(local-at, uptime)
	}
	if s.flaw == noUptimeCap {
		return local
	}
	return uptime
}

func (s *sim) poll(i int, local time.Duration) {
	n := s.nodes[i]
	if s.reachesAPI(i) {
		l := s.api.lease[i]
		renewal := fencing.Renewal{RenewTime: l.renewTime, Holder: n.name}
		n.san.LeaseRead(local, renewal)
	}
	for _, m := range n.san.List().Members {
		j := index(m)
		peer := s.nodes[j]
		if j == i || !peer.up || !peer.agentUp || peer.paused(s.now) || !s.topo.reach[i][j] {
			continue
		}
		// The responder records whom it heard before it answers.
		peer.heard[n.name] = peer.local(s.now)
		if s.topo.reach[j][i] {
			n.heard[m] = local
			n.san.Answered(m, local)
		}
	}
	if !s.reachesAPI(i) {
		return
	}
	if pub := s.api.list; pub.Number > n.list.Number && slices.Contains(pub.Members, n.name) {
		// Switch lists only after a report naming both is written.
		n.lists = []fencing.List{pub, n.list}
		s.writeReport(i, n.wdArmed)
		n.list = pub
		n.san.SwitchList(pub)
		n.lists = []fencing.List{pub}
		return
	}
	s.writeReport(i, n.wdArmed)
}

func (s *sim) writeReport(i int, armed bool) {
	n := s.nodes[i]
	want := fencing.Report{Armed: armed, Timing: s.timing, BootID: n.bootID(), Lists: slices.Clone(n.lists)}
	if cur := s.api.report[i]; cur != nil && cur.Armed == want.Armed && cur.BootID == want.BootID && listsEqual(cur.Lists, want.Lists) {
		return
	}
	s.api.reportRV++
	want.Version = strconv.Itoa(s.api.reportRV)
	s.api.report[i] = &want
}

func listsEqual(a, b []fencing.List) bool {
	return slices.EqualFunc(a, b, func(x, y fencing.List) bool {
		return x.Number == y.Number && slices.Equal(x.Members, y.Members)
	})
}

// disarm is the graceful path: only while sanctioned, a report saying
// disarmed is written and read back, then the magic close.
func (s *sim) disarm(i int, local time.Duration) {
	n := s.nodes[i]
	if !s.reachesAPI(i) || !n.wdArmed || !n.san.Sanctioned(local) {
		return
	}
	s.writeReport(i, false)
	if n.san.MayDisarm(local, true) {
		n.wdArmed = false
	}
}

func index(name string) int {
	i, _ := strconv.Atoi(name[len("node-"):])
	return i
}

func (s *sim) controller() {
	now := s.ctrlOff + time.Duration(float64(s.now)*s.ctrlRate)
	for x := range s.nodes {
		in := fencing.Input{Now: now, Dead: s.alwaysDead || s.now-s.api.lease[x].renewedAt >= s.lag+s.deadAfter}
		read := fencing.Observation{LeaseVersion: strconv.Itoa(s.api.lease[x].rv), BootID: s.api.nodeBoot[x]}
		if rep := s.api.report[x]; rep != nil {
			c := *rep
			if s.flaw == noBootCheck {
				c.BootID = read.BootID
			}
			read.Report = &c
		}
		in.Read = &read
		for _, t := range s.api.answers[x] {
			t.LeaseRenewing = s.now-s.api.lease[index(t.Member)].renewedAt < modelRenewingWithin
			in.Testimonies = append(in.Testimonies, t)
		}
		if t := s.api.taint[x]; t != nil {
			in.FencedBoot = t.boot
		}
		in.Ready = s.now-s.api.lease[x].renewedAt < modelRenewingWithin
		if s.api.podBound[x] {
			in.OldPods = 1
		}
		f := s.fencers[x]
		step := f.Step(in)
		switch step.Action {
		case fencing.PublishRound:
			s.api.round[x] = step.Round
			clear(s.api.answers[x])
			f.Published(step.Round)
		case fencing.Taint:
			s.api.taint[x] = &simTaint{boot: step.BootID, at: s.now}
			s.api.round[x] = ""
			f.Tainted(step.Round)
		case fencing.DeletePods:
			s.api.podBound[x] = false
			f.Deleted(step.Round)
			s.fenced++
		case fencing.Untaint:
			s.api.taint[x] = nil
			s.api.podBound[x] = true
		}
	}
}

func (s *sim) check() {
	for x, t := range s.api.taint {
		n := s.nodes[x]
		if t != nil && n.alive() && n.podBoot == n.boot && n.podBoot != 0 {
			s.violations = append(s.violations, fmt.Sprintf("at %s: %s tainted at %s while its boot %d runs its pod (paused %v, armed %v, watchdog in %s)",
				s.now, n.name, t.at, n.boot, n.paused(s.now), n.wdArmed, n.wdDeadline-s.now))
		}
	}
}

// event applies one random event at a step boundary.
func (s *sim) event() {
	r := s.r
	i := r.IntN(len(s.nodes))
	n := s.nodes[i]
	switch r.IntN(40) {
	case 0: // the host dies; it comes back later on a new boot
		if n.up {
			n.up, n.agentUp, n.wdArmed, n.podBoot = false, false, false, 0
			n.upAt = s.now + 60*time.Second + time.Duration(r.Int64N(int64(3*time.Minute)))
		}
	case 1: // the agent is killed; a new one starts within W
		n.agentUp = false
		n.agentUpAt = s.now + time.Duration(r.Int64N(int64(s.timing.Watchdog)))
	case 2: // the agent stops gracefully (a rollout)
		if n.up && n.agentUp {
			s.disarm(i, n.local(s.now))
			n.agentUp = false
			n.agentUpAt = s.now + 2*time.Second + time.Duration(r.Int64N(int64(8*time.Second)))
		}
	case 3: // the kubelet stops for a while
		n.kubeletUpAt = s.now + time.Duration(r.Int64N(int64(time.Minute)))
	case 4: // someone writes the Lease without renewing it
		s.api.lease[i].rv++
	case 5: // the controller fails over
		for _, f := range s.fencers {
			f.Reset()
		}
		s.lag = time.Duration(r.Int64N(int64(3 * time.Second)))
	case 6: // the machine is paused
		if n.up && !n.paused(s.now) {
			d := time.Duration(r.Int64N(int64(s.timing.Watchdog)))
			if s.flaw == longPause {
				d = s.timing.Sanction + 2*s.timing.Watchdog + 10*time.Second + time.Duration(r.Int64N(int64(time.Minute)))
			}
			n.pausedAt, n.pausedTo = s.now, s.now+d
		}
	case 7: // the kubelet's wall clock steps
		n.wall += time.Duration(r.Int64N(int64(time.Minute))) - 30*time.Second
	case 8: // a node is added to the list
		if len(s.api.list.Members) < len(s.nodes) {
			s.api.list = fencing.List{Number: s.api.list.Number + 1, Members: append(slices.Clone(s.api.list.Members), name(len(s.nodes)-1))}
			last := s.nodes[len(s.nodes)-1]
			last.list = s.api.list
		}
	}
}

// run plays the model: healthy warm-up, then first, then a sequence of
// random cuts, heals and events, changing only at steps of T/3.
func (s *sim) run(first topology, length time.Duration) {
	cut := modelWarmup + modelStep*time.Duration(s.r.IntN(3))
	nextStep, step := modelStep, 0
	for s.now = 0; s.now < cut+length; s.now += modelTick {
		if s.now >= nextStep {
			nextStep += modelStep
			step++
			s.record()
			if s.script != nil {
				s.script(s, step)
				s.tick()
				continue
			}
			switch {
			case s.now >= cut && s.now < cut+modelStep:
				s.topo = first
			case s.now >= cut && s.r.IntN(6) == 0:
				if s.r.IntN(2) == 0 {
					s.topo = fullTopology(len(s.nodes))
				} else {
					s.topo = randomTopology(s.r, len(s.nodes))
				}
			}
			if s.now >= cut && s.r.IntN(2) == 0 {
				s.event()
			}
		}
		s.tick()
	}
}

// record counts the abstract state at a step: the topology, and per node
// what the rules can tell apart.
func (s *sim) record() {
	h := fnv.New64a()
	var b []byte
	for i, n := range s.nodes {
		for j := range s.nodes {
			b = append(b, bit(s.topo.reach[i][j]))
		}
		local := n.local(s.now)
		sanctioned := n.san != nil && n.san.Sanctioned(local)
		b = append(b, bit(s.topo.api[i]), bit(n.up), bit(n.paused(s.now)), bit(n.wdArmed), bit(n.agentUp), bit(sanctioned),
			bit(s.api.taint[i] != nil), bit(s.api.podBound[i]), bit(n.podBoot != 0), bit(s.api.round[i] != ""), byte(n.list.Number))
	}
	h.Write(b)
	s.states[h.Sum64()] = struct{}{}
}

func bit(v bool) byte {
	if v {
		return 1
	}
	return 0
}
