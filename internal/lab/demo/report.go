package demo

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed report.html.tmpl
var reportTemplateText string

var reportTemplate = template.Must(template.New("report").Parse(reportTemplateText))

// WriteHTMLFile writes the report as one self-contained HTML page (inline
// CSS and SVG, no script, no external resource) to path, atomically.
func WriteHTMLFile(path string, r Report) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".rebound-demo-*.html")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := WriteHTML(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// WriteHTML renders the report as one self-contained HTML page.
func WriteHTML(w io.Writer, r Report) error {
	return reportTemplate.Execute(w, buildPage(r))
}

// The view model: every coordinate is computed here, so the template only
// places precomputed numbers and text (which html/template escapes).

type pageView struct {
	Started   string
	Timings   string
	Table     []tableRow
	Scenarios []scenarioView
}

type tableRow struct {
	Scenario, Title string
	Cells           []tableCell
}

type tableCell struct {
	Text                 string
	Recovered, NotPlayed bool
}

type scenarioView struct {
	ID, Title, Description, Measure string
	Lanes                           []laneView
}

type laneView struct {
	Name    string
	Outcome string
	Chart   chartView
	Events  []eventRow
}

type eventRow struct {
	At, Kind, Subject, Detail string
}

type chartView struct {
	Width, Height  int
	PlotX, PlotW   int
	AxisY, TickY   int
	PlotEnd        int
	Rows           []chartRow
	Ticks          []tick
	Lines          []vline
	EndLabel       string
	EndX           float64
	HasBGP, HasPod bool
}

type chartRow struct {
	Label        string
	Y, H, TextY  int
	Bars         []bar
	Marks        []mark
	Band, Header bool
}

type bar struct {
	X, W         string
	Y            int
	Class, Title string
}

type mark struct {
	X, CY        string
	Class, Title string
}

type tick struct {
	X      string
	Y2     int
	LabelY int
	Label  string
}

type vline struct {
	X, LabelX      string
	Y1, Y2, LabelY int
	Class, Label   string
	Anchor         string
}

const (
	chartWidth  = 1100
	labelWidth  = 210
	rightMargin = 20
	rowHeight   = 22
	barHeight   = 14
	topMargin   = 40 // two lines of labels above the rows
)

func buildPage(r Report) pageView {
	p := pageView{Timings: timingsText(r)}
	if !r.Started.IsZero() {
		p.Started = r.Started.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	for _, s := range r.Scenarios {
		sv := scenarioView{ID: s.ID, Title: s.Title, Description: s.Description, Measure: s.Measure}
		row := tableRow{Scenario: s.ID, Title: s.Title}
		for _, name := range []string{laneWithout, laneWith} {
			cell := tableCell{Text: "not played", NotPlayed: true}
			for _, l := range r.Lanes {
				if l.Scenario == s.ID && l.Name == name {
					cell = tableCell{Text: l.Outcome, Recovered: l.Recovered}
				}
			}
			row.Cells = append(row.Cells, cell)
		}
		p.Table = append(p.Table, row)
		// The lanes of a scenario share a time axis, so they compare at a
		// glance.
		var end time.Duration
		for _, l := range r.Lanes {
			if l.Scenario == s.ID {
				end = max(end, laneEnd(l))
			}
		}
		for _, l := range r.Lanes {
			if l.Scenario != s.ID {
				continue
			}
			lv := laneView{Name: l.Name, Outcome: l.Outcome, Chart: buildChart(l, end)}
			for _, e := range l.Events {
				lv.Events = append(lv.Events, eventRow{At: fmt.Sprintf("+%.1fs", e.At.Seconds()), Kind: e.Kind, Subject: e.Subject, Detail: e.Detail})
			}
			sv.Lanes = append(sv.Lanes, lv)
		}
		p.Scenarios = append(p.Scenarios, sv)
	}
	return p
}

func timingsText(r Report) string {
	t := r.Timings
	if t.NodeMonitorGracePeriod == 0 {
		return ""
	}
	return fmt.Sprintf("node grace period %s, node monitor period %s, lease %s, pod tolerations %ds",
		t.NodeMonitorGracePeriod, t.NodeMonitorPeriod, t.NodeLeaseDuration, t.DefaultTolerationSeconds)
}

// span is a state held from one time to the next.
type span struct {
	from  time.Duration
	state string
	title string
}

// series accumulates the state changes of one chart row.
type series struct {
	label string
	spans []span
	marks []markAt
}

type markAt struct {
	at           time.Duration
	class, title string
}

func (s *series) set(at time.Duration, state, title string) {
	if n := len(s.spans); n > 0 && s.spans[n-1].state == state {
		return
	}
	s.spans = append(s.spans, span{from: at, state: state, title: title})
}

func (s *series) current() string {
	if n := len(s.spans); n > 0 {
		return s.spans[n-1].state
	}
	return ""
}

// ordered keeps series in order of first appearance, sorted within a group.
type ordered struct {
	byName map[string]*series
	names  []string
}

func (o *ordered) get(name string) *series {
	if o.byName == nil {
		o.byName = map[string]*series{}
	}
	s, ok := o.byName[name]
	if !ok {
		s = &series{label: name}
		o.byName[name] = s
		o.names = append(o.names, name)
	}
	return s
}

func (o *ordered) list() []*series {
	names := append([]string(nil), o.names...)
	sort.SliceStable(names, func(i, j int) bool { return naturalLess(names[i], names[j]) })
	out := make([]*series, len(names))
	for i, n := range names {
		out[i] = o.byName[n]
	}
	return out
}

// naturalLess orders "node-2" before "node-10".
func naturalLess(a, b string) bool {
	ta, na := splitNumber(a)
	tb, nb := splitNumber(b)
	if ta != tb || na < 0 || nb < 0 {
		return a < b
	}
	return na < nb
}

func splitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}

// laneEnd is the last moment the lane's chart must show.
func laneEnd(l Lane) time.Duration {
	var end time.Duration
	for _, e := range l.Events {
		end = max(end, e.At)
	}
	if l.Recovered {
		end = max(end, seconds(l.RecoveredAtSeconds))
	}
	return end
}

// buildChart lays out the lane's chart over [0, end] (extended to the
// lane's own last event if later).
func buildChart(l Lane, end time.Duration) chartView {
	var nodes, zones, bgp, workloads ordered
	steps := &series{label: "scenario steps"}
	pods := &series{label: "pod placement"}
	end = max(end, laneEnd(l))
	for _, e := range l.Events {
		title := fmt.Sprintf("+%.1fs %s %s", e.At.Seconds(), e.Subject, e.Detail)
		switch e.Kind {
		case "node":
			s := nodes.get(e.Subject)
			switch {
			case e.Detail == "Ready":
				s.set(e.At, "ready", title)
			case e.Detail == "NotReady":
				s.set(e.At, "notready", title)
			case strings.HasPrefix(e.Detail, "tainted NoExecute"):
				if s.current() != "ready" {
					s.set(e.At, "noexecute", title)
				}
				s.marks = append(s.marks, markAt{e.At, "taint", title})
			default:
				s.marks = append(s.marks, markAt{e.At, "info", title})
			}
		case "zone":
			state, _, _ := strings.Cut(e.Detail, " ")
			zones.get("zone "+e.Subject).set(e.At, zoneClass(state), title)
		case "bgp":
			bgp.get(e.Subject).set(e.At, bgpClass(e.Detail), title)
		case "routes":
			workloads.get(e.Subject).set(e.At, availabilityClass(e.Detail), title)
		case "workload":
			_, name, ok := strings.Cut(e.Subject, "/")
			if !ok {
				name = e.Subject
			}
			workloads.get(name+" available").set(e.At, availabilityClass(e.Detail), title)
		case "log":
			// The real parts' log lines: in the lane's table, not on its chart.
		case "pod":
			pods.marks = append(pods.marks, markAt{e.At, podClass(e.Detail), e.Subject + ": " + e.Detail + fmt.Sprintf(" (+%.1fs)", e.At.Seconds())})
		default:
			steps.marks = append(steps.marks, markAt{e.At, "step", fmt.Sprintf("+%.1fs %s", e.At.Seconds(), e.Detail)})
		}
	}
	end = max(end, time.Second)
	end = end + end/20 // a little room after the last event

	c := chartView{Width: chartWidth, PlotX: labelWidth, PlotW: chartWidth - labelWidth - rightMargin}
	x := func(at time.Duration) float64 {
		return float64(c.PlotX) + float64(c.PlotW)*at.Seconds()/end.Seconds()
	}
	y := topMargin
	add := func(s *series, header bool) {
		row := chartRow{Label: s.label, Y: y, H: barHeight, TextY: y + barHeight - 3, Header: header}
		for i, sp := range s.spans {
			to := end
			if i+1 < len(s.spans) {
				to = s.spans[i+1].from
			}
			row.Bars = append(row.Bars, bar{X: num(x(sp.from)), Y: y, W: num(math.Max(x(to)-x(sp.from), 0.5)), Class: sp.state, Title: sp.title})
		}
		for _, m := range s.marks {
			row.Marks = append(row.Marks, mark{X: num(x(m.at)), CY: strconv.Itoa(y + barHeight/2), Class: m.class, Title: m.title})
		}
		c.Rows = append(c.Rows, row)
		y += rowHeight
	}
	add(steps, true)
	for _, s := range zones.list() {
		add(s, false)
	}
	for _, s := range nodes.list() {
		add(s, false)
	}
	for _, s := range workloads.list() {
		add(s, false)
	}
	if len(pods.marks) > 0 {
		c.HasPod = true
		add(pods, false)
	}
	for _, s := range bgp.list() {
		c.HasBGP = true
		add(s, false)
	}
	c.AxisY = y + 4
	c.TickY = c.AxisY + 14
	c.PlotEnd = c.PlotX + c.PlotW
	c.Height = c.AxisY + 24
	for _, t := range ticks(end) {
		c.Ticks = append(c.Ticks, tick{X: num(x(t)), Y2: c.AxisY, LabelY: c.TickY, Label: fmt.Sprintf("%gs", t.Seconds())})
	}
	if l.FromLabel != "" {
		fx := x(seconds(l.FromSeconds))
		c.Lines = append(c.Lines, vline{X: num(fx), LabelX: num(fx - 4), LabelY: 13, Y1: 16, Y2: c.AxisY, Class: "from", Label: l.FromLabel, Anchor: "end"})
	}
	if l.Recovered {
		rx := x(seconds(l.RecoveredAtSeconds))
		lx, anchor := rx+4, "start"
		if rx > float64(c.PlotX)+0.8*float64(c.PlotW) { // keep the label inside the chart
			lx, anchor = rx-4, "end"
		}
		c.Lines = append(c.Lines, vline{X: num(rx), LabelX: num(lx), LabelY: 29, Y1: 32, Y2: c.AxisY, Class: "recovered",
			Label: fmt.Sprintf("recovered (%.1fs)", l.RecoverySeconds), Anchor: anchor})
	} else {
		c.EndLabel = "not recovered"
		c.EndX = float64(c.PlotX + c.PlotW)
	}
	return c
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// ticks returns round times for the axis, at most about 12.
func ticks(end time.Duration) []time.Duration {
	step := time.Second
	for _, s := range []time.Duration{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 3600} {
		step = s * time.Second
		if end/step <= 12 {
			break
		}
	}
	var out []time.Duration
	for t := time.Duration(0); t <= end; t += step {
		out = append(out, t)
	}
	return out
}

func zoneClass(state string) string {
	switch state {
	case "Normal":
		return "zone-normal"
	case "PartialDisruption":
		return "zone-partial"
	case "FullDisruption":
		return "zone-full"
	}
	return "zone-other"
}

func bgpClass(detail string) string {
	if strings.Contains(detail, "graceful-restart wait") {
		return "bgp-wait"
	}
	state, _, _ := strings.Cut(detail, " ")
	switch strings.ToLower(state) {
	case "established":
		return "bgp-up"
	case "down", "idle", "absent", "removed":
		return "bgp-down"
	}
	return "bgp-wait"
}

func availabilityClass(detail string) string {
	var a, d int
	if _, err := fmt.Sscanf(detail, "%d/%d", &a, &d); err == nil && d > 0 && a >= d {
		return "avail-full"
	}
	return "avail-degraded"
}

func podClass(detail string) string {
	switch {
	case detail == "deleted":
		return "pod-deleted"
	case strings.Contains(detail, "Terminating"):
		return "pod-terminating"
	case strings.HasPrefix(detail, "Pending"):
		return "pod-pending"
	case strings.Contains(detail, "not Ready"):
		return "pod-notready"
	}
	return "pod-ready"
}
