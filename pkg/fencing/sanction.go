package fencing

import (
	"slices"
	"time"
)

// List is a numbered member list: the agents whose answers count toward a
// node's sanction, and whose testimony counts toward its fencing. A node's
// own name may appear in it; it never counts for or against itself.
type List struct {
	Number  int64    `json:"number"`
	Members []string `json:"members"`
}

// Quorum is how many members of the list, the node itself left out, make a
// strict majority.
func (l List) Quorum(node string) int {
	return len(l.others(node))/2 + 1
}

func (l List) others(node string) []string {
	out := make([]string, 0, len(l.Members))
	for _, m := range l.Members {
		if m != node && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Renewal is what of a Lease counts as its renewal: its renew time and
// holder. Any other change to the object (a label, an annotation, a write
// by someone other than the kubelet that keeps both) is not a renewal.
type Renewal struct {
	RenewTime string
	Holder    string
}

// Sanction is an agent's rule for feeding its node's watchdog. All times
// are the agent's boot clock. The zero value is not sanctioned; NewSanction
// gives a usable one.
//
// The node is sanctioned until the latest of:
//   - (a) the send of the earlier of two consecutive quorum reads of its
//     Lease that saw it renewed, plus T;
//   - (b) the send of the probe that brought the quorum-th most recent
//     answer from the members of its list, plus T.
//
// It feeds only while at least W of the sanction remains, so the watchdog
// resets the node no later than the sanction's end.
type Sanction struct {
	node   string
	timing Timing
	list   List

	until time.Duration
	// lastRead is the previous successful quorum read of the Lease.
	lastRead *leaseRead
	// answered is, per member, the send time of the latest probe it
	// answered.
	answered map[string]time.Duration
	// sanctioned is set once the node has been sanctioned since the
	// agent started: it arms only after that.
	sanctioned bool
}

type leaseRead struct {
	sentAt  time.Duration
	renewal Renewal
}

// NewSanction starts the rule for node with the member list it last
// reported (kept on the host, so that an agent restarted during an API
// outage counts against the same list).
func NewSanction(node string, timing Timing, list List) *Sanction {
	return &Sanction{node: node, timing: timing, list: list, answered: map[string]time.Duration{}}
}

// Timing returns the timing the rule runs with.
func (s *Sanction) Timing() Timing { return s.timing }

// List returns the list the rule counts against.
func (s *Sanction) List() List { return s.list }

// LeaseRead records a successful quorum read of the node's Lease, sent at
// sentAt. Reads must be sequential: the next one is sent after this one's
// answer arrived. A renewal seen between two reads happened after the
// earlier one was sent; that is all the rule relies on. A failed read is
// not recorded: the next successful one is compared with the last, which
// still preceded any renewal seen after it.
func (s *Sanction) LeaseRead(sentAt time.Duration, r Renewal) {
	if s.lastRead != nil && s.lastRead.renewal != r && sentAt > s.lastRead.sentAt {
		s.extend(s.lastRead.sentAt + s.timing.Sanction)
	}
	s.lastRead = &leaseRead{sentAt: sentAt, renewal: r}
}

// Answered records that member answered the probe sent at sentAt. The
// member recorded the node as heard before it answered.
func (s *Sanction) Answered(member string, sentAt time.Duration) {
	if member == s.node || !slices.Contains(s.list.Members, member) {
		return
	}
	if prev, ok := s.answered[member]; ok && prev >= sentAt {
		return
	}
	s.answered[member] = sentAt
	if at, ok := s.peersSince(); ok {
		s.extend(at + s.timing.Sanction)
	}
}

// peersSince returns the send time of the probe that brought the
// quorum-th most recent answer: a strict majority of the list answered
// probes sent at or after it.
func (s *Sanction) peersSince() (time.Duration, bool) {
	others := s.list.others(s.node)
	q := len(others)/2 + 1
	if len(others) == 0 {
		return 0, false
	}
	var sent []time.Duration
	for _, m := range others {
		if at, ok := s.answered[m]; ok {
			sent = append(sent, at)
		}
	}
	if len(sent) < q {
		return 0, false
	}
	slices.Sort(sent)
	slices.Reverse(sent)
	return sent[q-1], true
}

func (s *Sanction) extend(until time.Duration) {
	if until > s.until {
		s.until = until
	}
	s.sanctioned = true
}

// Until returns when the sanction ends.
func (s *Sanction) Until() time.Duration { return s.until }

// Sanctioned reports whether the node is sanctioned at now.
func (s *Sanction) Sanctioned(now time.Duration) bool { return now < s.until }

// PeersHold reports whether rule (b) holds at now: a strict majority of
// the list answered probes sent within T. The agent arms only while it
// holds, so that a probe path that is blocked everywhere (a NetworkPolicy,
// a split gossip key, a rollout) cannot turn an API outage into a reset of
// every node.
func (s *Sanction) PeersHold(now time.Duration) bool {
	at, ok := s.peersSince()
	return ok && now < at+s.timing.Sanction
}

// MayFeed reports whether a keepalive at now is allowed: at least W of the
// sanction remains, so the reset it postpones still comes before the
// sanction's end.
func (s *Sanction) MayFeed(now time.Duration) bool {
	return now+s.timing.Watchdog <= s.until
}

// MayArm reports whether the agent may arm its watchdog at now: it has
// been sanctioned since it started, is sanctioned now, and its peers hold.
func (s *Sanction) MayArm(now time.Duration) bool {
	return s.sanctioned && s.MayFeed(now) && s.PeersHold(now)
}

// MayDisarm reports whether the agent may write the magic close at now:
// only while sanctioned (a sanctioned node is one the controller cannot
// be about to fence), and only once a report saying disarmed has been
// written and read back, so that the controller's re-read before a taint
// sees it.
func (s *Sanction) MayDisarm(now time.Duration, disarmedReportReadBack bool) bool {
	return disarmedReportReadBack && s.Sanctioned(now)
}

// SwitchList makes next the list the rule counts against. Call it only
// after a report naming next (beside the current one) has been written:
// the controller counts against every list a report names. Answers from
// the old list do not carry over.
func (s *Sanction) SwitchList(next List) {
	s.list = next
	s.answered = map[string]time.Duration{}
}
