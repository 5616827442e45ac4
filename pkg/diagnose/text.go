package diagnose

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"rebound/pkg/unreachable"
)

// textWidth is where human output wraps.
const textWidth = 100

// WriteJSON writes the report as indented JSON (docs/diagnose.md), with
// "<", ">" and "&" as they are.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteText writes the report for people: the findings ranked by impact,
// each with its cause first, then one short section per subject.
func WriteText(w io.Writer, r Report) error {
	p := &printer{}
	p.linef("%s (cluster read at %s)", capitalize(r.Summary), stamp(r.Time))
	if len(r.Findings) > 0 {
		p.blank()
		for _, f := range r.Findings {
			label := strings.ToUpper(string(f.Impact))
			p.linef("%-9s %s", label, f.Object)
			p.wrapped("          ", f.Cause)
			if f.Rebound != "" {
				p.wrapped("          ", "rebound: "+f.Rebound)
			}
		}
	}

	p.section("Zones (as kube-controller-manager computes them)")
	if r.FullDisruptionMode {
		p.wrapped("  ", "every zone is FullDisruption: kube-controller-manager stops all NoExecute tainting and removes the taints it added")
	}
	for _, z := range r.Zones {
		large := "<="
		if z.LargeZone {
			large = ">"
		}
		p.linef("  %s: %s, %d/%d NotReady (%.2f, threshold %g)", z.Zone, z.State, z.NotReady, z.Total, z.NotReadyFraction, z.UnhealthyZoneThreshold)
		p.linef("    eviction rate %g/s (zone size %d %s large-cluster threshold %d)", z.EvictionRate, z.Total, large, z.LargeClusterSizeThreshold)
		if len(z.NotReadyNodes) > 0 {
			p.wrapped("    ", "NotReady: "+strings.Join(z.NotReadyNodes, ", "))
		}
	}
	if len(r.Zones) == 0 {
		p.line("  no nodes")
	}

	p.section("Critical pods on NotReady nodes (or dead on both planes)")
	if len(r.CriticalPods) == 0 {
		p.line("  none")
	}
	for _, c := range r.CriticalPods {
		p.wrapped("  ", fmt.Sprintf("%s/%s on %s, %s", c.Namespace, c.Name, c.Node, downClock(c, r.Time)))
		p.wrapped("    ", "upstream eviction: "+c.Upstream)
		if c.DeletedBy != nil {
			p.wrapped("    ", deletedByText(c.DeletedBy))
		}
		if c.NodeAlive != "" {
			p.wrapped("    ", "node appears alive but cut off from the API: "+c.NodeAlive)
		}
		head := c.Decision
		if c.Action != "" {
			head += " " + c.Action
		}
		if c.DryRun {
			head += " (dry run)"
		}
		// The reason is in the finding above, except for pods rebound
		// never touches, which get no finding.
		if c.Decision == "Skip" {
			p.wrapped("    ", fmt.Sprintf("rebound: %s (policy %s): %s", head, c.Policy, c.Reason))
		} else {
			p.wrapped("    ", fmt.Sprintf("rebound: %s (policy %s, deadline %s)", head, c.Policy, clock(c.Deadline, r.Time)))
		}
	}

	if len(r.Liveness) > 0 {
		p.section("Liveness of the nodes not plainly Alive (clocks from the API's times)")
		for _, l := range r.Liveness {
			state := "NotReady"
			if l.ReadyInAPI {
				state = "Ready in the API"
			}
			p.linef("  %s: %s, %s since %s; BGP: %d observer(s), %d down, %d up", l.Node, l.Verdict, state, clock(l.Since, r.Time), l.Observers, l.DownVotes, l.UpVotes)
			if l.LeaseAge != nil || l.GossipWatchers > 0 {
				lease := "no Lease"
				if l.LeaseAge != nil {
					lease = fmt.Sprintf("Lease renewed %.1fs ago", float64(*l.LeaseAge))
					if l.LeaseStale {
						lease += " (stale)"
					}
				}
				p.linef("    planes: %s; gossip: %d watcher(s), %d dead, %d alive", lease, l.GossipWatchers, l.GossipDown, l.GossipUp)
			}
			p.wrapped("    ", l.Reason)
		}
	}

	if len(r.Unreachable) > 0 {
		p.section("Nodes dead on both planes (" + unreachable.TaintKey + ")")
		for _, u := range r.Unreachable {
			head := u.Plan
			if u.Hold != "" {
				head += " (" + u.Hold + ")"
			}
			if u.Marked {
				p.linef("  %s: marked since %s, %d pod(s) marked not ready; %s", u.Node, clock(derefTime(u.Since), r.Time), u.PodsMarkedNotReady, head)
			} else {
				p.linef("  %s: not marked; %s", u.Node, head)
			}
			p.wrapped("    ", u.Reason)
		}
	}

	if f := r.Fencing; f != nil {
		p.section("Fencing (" + fencingHeader(f) + ")")
		for _, n := range f.Nodes {
			p.wrapped("  ", n.Node+": "+fencingLine(n, r.Time))
		}
	}

	if ed := r.EarlyDetection; ed.Status != "" && ed.Status != "NotInUse" {
		p.section("Early detection (dead on both planes while the API has the node Ready)")
		p.wrapped("  ", ed.Message)
		for _, n := range ed.Nodes {
			mode := "off"
			if n.Mode == "LeaseOnly" {
				mode = "on the Lease alone"
			}
			p.wrapped("  ", fmt.Sprintf("%s: %s (%d watcher(s), %d can vote, quorum %d): %s", n.Node, mode, n.Watchers, n.Voters, n.Quorum, n.Reason))
		}
		if h := ed.Hold; h != nil {
			p.wrapped("  ", fmt.Sprintf("held cluster-wide (%s) until %s: %s", h.Reason, clock(h.Until, r.Time), h.Detail))
		}
		for _, d := range ed.Disagreements {
			held := "not held (no vote)"
			switch d.Held {
			case "Node":
				held = "not judged early until " + clock(d.HeldUntil, r.Time)
			case "ClusterWide":
				held = "held cluster-wide"
			}
			p.wrapped("  ", fmt.Sprintf("%s: the planes disagree (%s), %s: %s", d.Node, d.Reason, held, d.Detail))
		}
	}

	p.section("Workloads not Available")
	if len(r.Workloads) == 0 {
		p.line("  none")
	}
	for _, wl := range r.Workloads {
		p.linef("  %-8s %s %s/%s %d/%d", strings.ToLower(string(wl.Impact)), wl.Kind, wl.Namespace, wl.Name, wl.Available, wl.Desired)
	}

	p.section("BGP")
	if r.BGP.Message != "" {
		p.wrapped("  ", r.BGP.Message)
	}
	if c := r.BGP.Calico; c != nil {
		if c.APIGroup != "" {
			p.wrapped("  ", fmt.Sprintf("Calico BGPPeer written to %s: %s", c.APIGroup, c.Reason))
		} else {
			p.wrapped("  ", "Calico BGPPeer written nowhere: "+c.Reason)
		}
	}
	for _, n := range r.BGP.Nodes {
		state := "Ready"
		if !n.Ready {
			state = "NotReady"
		}
		stale := ""
		if n.Stale {
			stale = ", stale"
		}
		line := fmt.Sprintf("  %s (%s): report of %s%s, %d Established", n.Node, state, clock(n.ReportTime, r.Time), stale, n.Established)
		if n.Error != "" {
			line += ", error: " + oneLine(n.Error)
		}
		p.line(line)
		for _, wt := range n.Waiting {
			p.wrapped("    ", fmt.Sprintf("waits for %s (%s, peer %s, in-set=%s) since about %s", wt.Peer, wt.State, readyWord(wt.PeerReady), orNone(wt.PeerInSet), clock(wt.Since, r.Time)))
		}
	}
	for _, m := range r.BGP.KeptNotReady {
		p.wrapped("  ", fmt.Sprintf("kept in the set while NotReady: %s (%s: %s)", m.Node, m.Reason, m.Message))
	}
	for _, m := range r.BGP.LeftOut {
		p.wrapped("  ", fmt.Sprintf("left out of the set: %s (%s: %s)", m.Node, m.Reason, m.Message))
	}
	if len(r.BGP.Budgets) > 0 {
		p.line("  blackhole budget (worst case after a failure: detection + graceful restart + wait on return):")
	}
	for _, bb := range r.BGP.Budgets {
		p.wrapped("    ", budgetLine(bb))
	}

	p.section("RecoveryPolicies (critical: their pods on NotReady nodes)")
	if len(r.Policies) == 0 {
		p.line("  none")
	}
	for _, pol := range r.Policies {
		flags := ""
		if !pol.Valid {
			flags += ", INVALID"
		}
		if pol.Suspended {
			flags += ", suspended"
		}
		if pol.DryRun {
			flags += ", dry run"
		}
		blocked := ""
		if pol.Held > 0 || pol.NoTarget > 0 {
			blocked = fmt.Sprintf(", %d held, %d without a target node", pol.Held, pol.NoTarget)
		}
		p.linef("  %s (%s%s): %d critical, %d stranded, %d waiting for fencing%s, %d action(s) planned",
			pol.Name, pol.Source, flags, pol.Critical, pol.Stranded, pol.WaitingForFencing, blocked, pol.Actions)
	}
	if len(r.Warnings) > 0 {
		p.section("Warnings")
		for _, wn := range r.Warnings {
			p.wrapped("  ", wn)
		}
	}
	_, err := io.WriteString(w, p.b.String())
	return err
}

type printer struct{ b strings.Builder }

func (p *printer) line(s string) { p.b.WriteString(s + "\n") }

func (p *printer) linef(format string, args ...any) { p.line(fmt.Sprintf(format, args...)) }

func (p *printer) blank() { p.b.WriteString("\n") }

func (p *printer) section(title string) {
	p.blank()
	p.line(title)
}

// wrapped writes text in lines of at most textWidth, each starting with
// indent.
func (p *printer) wrapped(indent, text string) {
	for _, l := range wrap(text, textWidth-len(indent)) {
		p.line(indent + l)
	}
}

// wrap breaks text at spaces into lines of at most width characters; a
// longer word gets a line of its own.
func wrap(text string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, word := range strings.Fields(text) {
		if cur.Len() > 0 && cur.Len()+1+len(word) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(word)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// downClock says since when a critical pod's node is down: NotReady since
// its transition, or Ready in the API and dead on both planes since the
// verdict; never a duration from an unknown time.
func downClock(c CriticalPod, now time.Time) string {
	switch {
	case c.ReadyInAPI && !c.DetectedAt.IsZero():
		return fmt.Sprintf("Ready in the API, dead on both planes since %s (%s)", clock(c.DetectedAt, now), short(now.Sub(c.DetectedAt)))
	case c.ReadyInAPI:
		return "Ready in the API"
	case c.NotReadySince.IsZero():
		return "NotReady since an unknown time"
	}
	return fmt.Sprintf("NotReady since %s (%s)", clock(c.NotReadySince, now), short(now.Sub(c.NotReadySince)))
}

// clock renders a time relative to now's day: "15:04:05Z" on the same
// day, the full RFC 3339 form otherwise.
func clock(t, now time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	t, now = t.UTC(), now.UTC()
	if t.Year() == now.Year() && t.YearDay() == now.YearDay() {
		return t.Format("15:04:05Z")
	}
	return stamp(t)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func readyWord(ready bool) string {
	if ready {
		return "Ready"
	}
	return "NotReady"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// fencingHeader says what the published document holds.
func fencingHeader(f *Fencing) string {
	switch f.Document {
	case FencingDocumentPublished:
		return fmt.Sprintf("watchdog self-fencing; published list %d of %d member(s), %d open round(s)", f.ListNumber, f.Members, f.OpenRounds)
	case FencingDocumentNotPublished:
		return "watchdog self-fencing; no document published"
	case FencingDocumentForbidden:
		return "watchdog self-fencing; document not readable: Forbidden"
	}
	return "watchdog self-fencing; document unreadable"
}

// fencingLine is one node's line: the cause first (the node's Reason),
// then the agent's report, the open round and the controller's latest
// Event.
func fencingLine(n FencingNode, now time.Time) string {
	parts := []string{n.Reason}
	if a := n.Agent; a != nil {
		armed := "armed"
		if !a.Armed {
			armed = "not armed"
		}
		lists := make([]string, len(a.Lists))
		for i, l := range a.Lists {
			lists[i] = fmt.Sprint(l)
		}
		boot := "the Node's boot"
		if n.EarlierBoot {
			boot = "an earlier boot"
		}
		parts = append(parts, fmt.Sprintf("report of %s: %s, W %ds, T %ds, list %s, boot %s (%s)",
			clock(a.ObservedAt, now), armed, a.WatchdogSeconds, a.SanctionSeconds, orNone(strings.Join(lists, ", ")), orNone(a.BootID), boot))
	}
	if n.OpenRound != "" {
		parts = append(parts, "round "+n.OpenRound+" open: the members are asked to testify")
	}
	if ev := n.LastEvent; ev != nil {
		parts = append(parts, fmt.Sprintf("last Event %s at %s: %s", ev.Reason, clock(ev.Time, now), oneLine(ev.Message)))
	}
	return strings.Join(parts, "; ")
}
