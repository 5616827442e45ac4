package liveness

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return t0.Add(-d) }

func up(name string) Node { return Node{Name: name, Ready: true, Transition: ago(time.Hour)} }

func down(name string, since time.Time) Node { return Node{Name: name, Transition: since} }

// report is a fresh report read at observedAt listing sessions.
func report(reporter string, observedAt time.Time, sessions ...Session) Report {
	return Report{Reporter: reporter, ObservedAt: observedAt, Sessions: sessions}
}

func est(peer string, since time.Time) Session {
	return Session{Peer: peer, State: StateEstablished, Since: since}
}

func lost(peer string) Session { return Session{Peer: peer, State: "Active"} }

func bfdLost(peer string, since time.Time) Session {
	return Session{Peer: peer, State: "Active", BFD: BFDDown, Since: since}
}

// TestAssess: one row per rule, the adversarial ones among them (a liar,
// a lone reporter, a kubelet clock behind, a stale record).
func TestAssess(t *testing.T) {
	five := []Node{up("a"), up("b"), up("c"), down("x", ago(time.Minute)), up("d")}
	tests := []struct {
		name      string
		nodes     []Node
		reports   []Report
		firstSeen map[string]time.Time
		subject   string
		want      Verdict
		wantVeto  bool
		wantSince time.Time
		wantDown  time.Time
		words     string
	}{
		{name: "Ready is Alive", nodes: five, subject: "a", want: Alive},
		{name: "NotReady without reports: Unknown, the API alone speaks", nodes: five, subject: "x", want: Unknown, words: "no fresh Ready observer"},
		{
			name: "a quorum of observers down: Dead", nodes: five, subject: "x", want: Dead,
			reports:  []Report{report("a", ago(time.Second), lost("x")), report("b", ago(time.Second), lost("x")), report("c", ago(time.Second), lost("x"))},
			wantDown: ago(time.Minute), words: "3 of 3",
		},
		{
			name: "one liar of four says down: no quorum (abstainers count)", nodes: five, subject: "x", want: Unknown,
			reports: []Report{report("a", ago(time.Second), lost("x")), report("b", ago(2*time.Minute)), report("c", ago(2*time.Minute)), report("d", ago(2*time.Minute))},
			words:   "short of the quorum of 3",
		},
		{
			name: "one observer with a live session vetoes a quorum's death", nodes: five, subject: "x", want: Unknown, wantVeto: true,
			reports: []Report{report("a", ago(time.Second), lost("x")), report("b", ago(time.Second), lost("x")), report("c", ago(time.Second), est("x", ago(time.Hour)))},
		},
		{
			name: "a session re-established after the transition: CutOffFromAPI", nodes: five, subject: "x", want: CutOffFromAPI, wantVeto: true,
			reports: []Report{report("a", ago(time.Second), est("x", ago(30*time.Second)))},
		},
		{
			name: "BFD up after the transition: CutOffFromAPI", nodes: five, subject: "x", want: CutOffFromAPI, wantVeto: true,
			reports: []Report{report("a", ago(time.Second), Session{Peer: "x", State: StateEstablished, BFD: BFDUp})},
		},
		{
			name: "an old session past the hold time after the transition: CutOffFromAPI", subject: "x", want: CutOffFromAPI, wantVeto: true,
			nodes:   []Node{up("a"), down("x", ago(DefaultHoldTime+time.Minute))},
			reports: []Report{report("a", ago(time.Second), est("x", ago(time.Hour)))},
			words:   "hold time",
		},
		{
			name: "an old session within the hold time: a veto, no proof of life", nodes: five, subject: "x", want: Unknown, wantVeto: true,
			reports: []Report{report("a", ago(time.Second), est("x", ago(time.Hour)))},
		},
		{
			name: "a node's own report never speaks for it", subject: "x", want: Unknown,
			nodes:   []Node{up("a"), down("x", ago(time.Minute))},
			reports: []Report{report("x", ago(time.Second), est("a", ago(time.Second)), est("x", ago(time.Second)))},
		},
		{
			name: "a NotReady reporter does not count", subject: "x", want: Unknown,
			nodes:   []Node{up("a"), down("x", ago(time.Minute)), down("y", ago(time.Minute))},
			reports: []Report{report("y", ago(time.Second), lost("x"))},
			words:   "no fresh Ready observer",
		},
		{
			name: "a stale report does not count", nodes: five, subject: "x", want: Unknown,
			reports: []Report{report("a", ago(DefaultReportMaxAge+time.Second), lost("x"))},
		},
		{
			name: "a report from the future does not count", nodes: five, subject: "x", want: Unknown,
			reports: []Report{report("a", t0.Add(time.Hour), lost("x"))},
		},
		{
			name: "a report read before the transition abstains", subject: "x", want: Unknown,
			nodes:   []Node{up("a"), down("x", ago(time.Minute))},
			reports: []Report{report("a", ago(2*time.Minute), lost("x"))},
			words:   "0 of 1",
		},
		{
			name: "a kubelet clock ten minutes behind: the clock starts at rebound's first sight", subject: "x", want: Unknown,
			nodes:     []Node{up("a"), down("x", ago(10*time.Minute))},
			firstSeen: map[string]time.Time{"x": ago(2 * time.Second)},
			wantSince: ago(2 * time.Second), words: "rebound's own observation",
		},
		{
			name: "no history: the API's transition, and the reason says so", subject: "x", want: Unknown,
			nodes:     []Node{up("a"), down("x", ago(10*time.Minute))},
			wantSince: ago(10 * time.Minute), words: "no observation history",
		},
		{
			name: "one reporter's BFD time cannot start the clock early: quorum of 2 of 3 needs two times", nodes: five, subject: "x", want: Dead,
			reports: []Report{
				report("a", ago(time.Second), bfdLost("x", ago(time.Hour))),
				report("b", ago(time.Second), lost("x")),
				report("c", ago(time.Second), lost("x")),
			},
			wantDown: ago(time.Minute),
		},
		{
			name: "a quorum's BFD times start the clock at the quorum-th earliest", nodes: five, subject: "x", want: Dead,
			reports: []Report{
				report("a", ago(time.Second), bfdLost("x", ago(time.Hour))),
				report("b", ago(time.Second), bfdLost("x", ago(90*time.Second))),
				report("c", ago(time.Second), bfdLost("x", ago(70*time.Second))),
			},
			wantDown: ago(90 * time.Second),
		},
		{
			name: "a liar listing the node twice votes once", nodes: five, subject: "x", want: Unknown,
			reports: []Report{report("a", ago(time.Second), lost("x"), lost("x")), report("b", ago(2*time.Minute)), report("c", ago(2*time.Minute))},
			words:   "1 of 3",
		},
		{
			name: "a recovering BIRD knows nothing", subject: "x", want: Unknown,
			nodes:   []Node{up("a"), down("x", ago(time.Minute))},
			reports: []Report{{Reporter: "a", ObservedAt: ago(time.Second), Recovering: true, Sessions: []Session{lost("x")}}},
			words:   "no fresh Ready observer",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Assess(Input{Nodes: tt.nodes, Reports: tt.reports, FirstSeen: tt.firstSeen}, t0)
			v := a.Of(tt.subject)
			if v.Verdict != tt.want {
				t.Errorf("verdict = %s, want %s (%s)", v.Verdict, tt.want, v.Reason)
			}
			if (v.Veto != "") != tt.wantVeto {
				t.Errorf("veto = %q, want one: %v", v.Veto, tt.wantVeto)
			}
			if !tt.wantSince.IsZero() && !v.Since.Equal(tt.wantSince) {
				t.Errorf("since = %s, want %s", v.Since, tt.wantSince)
			}
			if !v.DownSince.Equal(tt.wantDown) {
				t.Errorf("downSince = %s, want %s", v.DownSince, tt.wantDown)
			}
			if tt.words != "" && !strings.Contains(v.Reason, tt.words) {
				t.Errorf("reason %q lacks %q", v.Reason, tt.words)
			}
		})
	}
}

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 999: 500} {
		if got := Quorum(n); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestTracker(t *testing.T) {
	var tr Tracker
	nodes := []Node{up("a"), down("x", ago(time.Hour))}
	first := tr.Observe(nodes, t0)
	if !first["x"].Equal(t0) {
		t.Fatalf("first sight of x = %s, want now", first["x"])
	}
	later := tr.Observe(nodes, t0.Add(time.Minute))
	if !later["x"].Equal(t0) {
		t.Errorf("x unchanged: first sight moved to %s", later["x"])
	}
	// A planner that sees only a subset does not make the tracker forget.
	tr.Observe(nodes[:1], t0.Add(2*time.Minute))
	if got := tr.Observe(nodes, t0.Add(3*time.Minute)); !got["x"].Equal(t0) {
		t.Errorf("x forgotten after a subset: %s", got["x"])
	}
	nodes[1].Ready = true
	if got := tr.Observe(nodes, t0.Add(4*time.Minute)); !got["x"].Equal(t0.Add(4 * time.Minute)) {
		t.Errorf("x back Ready: since = %s, want the return", got["x"])
	}
}

// FuzzAssess: whatever the reporters say (liars included) and however
// wrong their clocks, no single report makes a node Dead (or starts its
// clock early) while another observer exists, a node's own report never counts for it, a Ready node
// is Alive, a live session always vetoes, and no clock starts before
// rebound's first sight of the state unless a quorum agrees.
func FuzzAssess(f *testing.F) {
	f.Add("a", "x", "Active", "Down", int64(3600), int64(1), int64(60), int64(2), true, true)
	f.Add("x", "x", "Established", "Up", int64(-5), int64(600), int64(10), int64(0), false, false)
	f.Add("b", "x", "Established", "", int64(30), int64(1), int64(300), int64(300), true, false)
	f.Fuzz(func(t *testing.T, reporter, peer, state, bfd string, sinceAgo, observedAgo, notReadyAgo, seenAgo int64, otherReports, secondLiar bool) {
		nodes := []Node{up("a"), up("b"), up("c"), down("x", ago(time.Duration(notReadyAgo)*time.Second))}
		firstSeen := map[string]time.Time{"x": ago(time.Duration(seenAgo) * time.Second)}
		lie := report(reporter, ago(time.Duration(observedAgo)*time.Second), Session{Peer: peer, State: state, BFD: bfd, Since: ago(time.Duration(sinceAgo) * time.Second)})
		reports := []Report{lie}
		if otherReports {
			reports = append(reports, report("c", ago(time.Second), est("x", ago(time.Hour))))
		}
		if secondLiar {
			reports = append(reports, report("b", ago(time.Second), bfdLost("x", ago(time.Duration(sinceAgo)*time.Second))))
		}
		a := Assess(Input{Nodes: nodes, Reports: reports, FirstSeen: firstSeen}, t0)
		for _, n := range nodes[:3] {
			if a.Of(n.Name).Verdict != Alive {
				t.Fatalf("Ready node %s is %s", n.Name, a.Of(n.Name).Verdict)
			}
		}
		v := a.Of("x")
		if v.Verdict == Dead && v.DownVotes < 2 && v.Observers > 1 {
			t.Fatalf("one reporter made x Dead while another observer exists: %s", v.Reason)
		}
		// c's report counts once it was read after x went NotReady.
		cCounts := otherReports && ago(time.Second).After(v.Since)
		if cCounts && v.Verdict == Dead {
			t.Fatalf("dead despite a live session: %s", v.Reason)
		}
		if cCounts && v.Veto == "" {
			t.Fatalf("a live session did not veto: %s", v.Reason)
		}
		if reporter == "x" && !otherReports && !secondLiar && v.Verdict != Unknown {
			t.Fatalf("x's own report decided: %s", v.Reason)
		}
		seen := firstSeen["x"]
		if v.Since.Before(seen) {
			t.Fatalf("clock starts at %s, before rebound's first sight %s", v.Since, seen)
		}
		if v.Verdict == Dead && v.DownSince.Before(v.Since) && v.DownVotes < 2 && v.Observers > 1 {
			t.Fatalf("one reporter's time started the clock early: %s", v.Reason)
		}
	})
}

// TestAssessLost: a Ready node is lost only when every working reporter
// lists its session down, and at least one does.
func TestAssessLost(t *testing.T) {
	nodes := []Node{up("a"), up("b"), up("x")}
	working := func(name string, sessions ...Session) Report {
		return Report{Reporter: name, ObservedAt: ago(time.Second), Established: 1, Sessions: sessions}
	}
	tests := []struct {
		name    string
		reports []Report
		want    bool
	}{
		{"no reporter says nothing", nil, false},
		{"every working reporter lost it", []Report{working("a", lost("x")), working("b", lost("x"))}, true},
		{"one working reporter still has it", []Report{working("a", lost("x")), working("b", est("x", ago(time.Hour)))}, false},
		{"a reporter that does not list it has it (compact reports)", []Report{working("a", lost("x")), working("b")}, false},
		{"a reporter with no live session says nothing", []Report{report("a", ago(time.Second), lost("x"))}, false},
		{"its own report is not evidence", []Report{working("x", lost("x"))}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Assess(Input{Nodes: nodes, Reports: tc.reports}, t0).Lost["x"] != ""
			if got != tc.want {
				t.Errorf("lost = %v, want %v", got, tc.want)
			}
		})
	}
}
