package bird

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Protocol is one row of `birdc show protocols`.
//
//	BIRD 1.6: name     proto    table    state  since       info
//	BIRD 2:   Name       Proto      Table      State  Since         Info
type Protocol struct {
	Name  string // protocol name, e.g. Mesh_10_0_0_2
	Proto string // protocol type: BGP, Device, Kernel, Static, ...
	Table string // "master" (1.6), "master4" or "---" (2)
	// State is BIRD's protocol state: up, start, wait, down, flush, ...
	// "wait" (1.6) is a protocol that is up but held by graceful-restart
	// recovery; BIRD 2 shows such a protocol as "up".
	State string
	// Since is when the state was entered, as BIRD prints it ("15:28:39",
	// "15:29:13.754", or a date and a time depending on `timeformat`).
	Since string
	// Info is the rest of the row, e.g. "Established" or
	// "Active        Socket: Connection refused"; empty for most non-BGP
	// protocols.
	Info string
}

// BGPState returns the BGP session state, the first word of Info for a BGP
// protocol (Idle, Connect, Active, OpenSent, OpenConfirm, Established,
// Passive), and "" for other protocols.
func (p Protocol) BGPState() string {
	if p.Proto != "BGP" {
		return ""
	}
	state, _, _ := strings.Cut(p.Info, " ")
	return state
}

// Established reports whether p is a BGP session in state Established.
func (p Protocol) Established() bool { return p.BGPState() == "Established" }

// Status is the part of `birdc show status` rebound reads.
type Status struct {
	Version             string     // "1.6.8", "2.0.12"
	RouterID            netip.Addr // "Router ID is ..."
	Hostname            string     // BIRD 2 only
	ServerTime          string     // "Current server time is ...", as printed
	LastReboot          string
	LastReconfiguration string
	// Daemon is the closing line: "Daemon is up and running",
	// "Daemon is shutting down", "Reconfiguration in progress", ...
	Daemon string
	// GracefulRestart is set while BIRD is in graceful-restart recovery
	// (started with -R): it has not programmed routes yet.
	GracefulRestart *GracefulRestartStatus
}

// Running reports whether the daemon said it is up and running.
func (s Status) Running() bool { return s.Daemon == "Daemon is up and running" }

// GracefulRestartStatus is the recovery block of `show status`:
//
//	Graceful restart recovery in progress
//	  Waiting for 1 protocols to recover     (BIRD 2: "channels")
//	  Wait timer is 54/60                    (BIRD 2: "53.998/60")
type GracefulRestartStatus struct {
	// Waiting is how many protocols (BIRD 1.6) or channels (BIRD 2) have
	// not recovered yet; WaitingUnit says which.
	Waiting     int
	WaitingUnit string
	// Remaining is what is left of the wait timer, Wait its configured
	// length (`graceful restart wait`).
	Remaining time.Duration
	Wait      time.Duration
}

// replyLine is one line of a reply with its BIRD reply code, -1 when birdc
// printed without codes.
type replyLine struct {
	code int
	text string
}

// Reply codes rebound reads (BIRD's doc/reply_codes).
const (
	codeWelcome        = 1    // 0001 BIRD x.y.z ready.
	codeProtocolRow    = 1002 // a row of `show protocols`
	codeProtocolHeader = 2002 // its header
)

var codePrefix = regexp.MustCompile(`^(\d{4})[ -]`)

// splitReply splits birdc output into lines. It accepts plain birdc output
// and the coded form of the control socket and of `birdc -v`: a line starts
// with a 4-digit reply code and "-" (more follows) or " " (last line), and
// continuation lines of the same code start with a space (one on the
// socket, five from birdc -v; the indentation is dropped, the code says
// what the line is). Reply codes 8000 and above are errors.
func splitReply(out string) ([]replyLine, error) {
	raw := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	coded := false
	for _, l := range raw {
		if strings.TrimSpace(l) != "" {
			coded = codePrefix.MatchString(l)
			break
		}
	}
	var lines []replyLine
	code := -1
	for _, l := range raw {
		if coded {
			if m := codePrefix.FindStringSubmatch(l); m != nil {
				code, _ = strconv.Atoi(m[1])
				l = l[5:]
			} else {
				l = strings.TrimLeft(l, " ")
			}
			if code >= 8000 {
				return nil, fmt.Errorf("BIRD replied with error %04d: %s", code, strings.TrimSpace(l))
			}
		}
		if strings.TrimSpace(l) == "" {
			continue
		}
		if code == codeWelcome || (!coded && isBanner(l)) {
			continue // "BIRD 1.6.8 ready."
		}
		lines = append(lines, replyLine{code: code, text: l})
	}
	return lines, nil
}

func isBanner(l string) bool {
	return strings.HasPrefix(l, "BIRD ") && strings.HasSuffix(l, " ready.")
}

var (
	dateToken = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	timeToken = regexp.MustCompile(`^\d{2}:\d{2}(:\d{2}(\.\d+)?)?$`)
)

// ParseShowProtocols parses `birdc show protocols` of BIRD 1.6 or 2, plain
// or with reply codes. Detail lines of `show protocols all` are skipped.
func ParseShowProtocols(out string) ([]Protocol, error) {
	lines, err := splitReply(out)
	if err != nil {
		return nil, err
	}
	header := -1
	for i, l := range lines {
		f := strings.Fields(l.text)
		if l.code == codeProtocolHeader || (len(f) >= 5 && strings.EqualFold(f[0], "name") && strings.EqualFold(f[1], "proto")) {
			header = i
			break
		}
	}
	if header < 0 {
		return nil, fmt.Errorf("no header line (name proto table state since info) in `show protocols` output: %.80q", out)
	}
	var protos []Protocol
	for i, l := range lines[header+1:] {
		if l.code >= 0 && l.code != codeProtocolRow {
			continue // coded: details of `show protocols all`, end of reply
		}
		if l.code < 0 && (l.text[0] == ' ' || l.text[0] == '\t') {
			continue // plain: details of `show protocols all`
		}
		rest := l.text
		var f [5]string
		for j := range f {
			f[j], rest = nextField(rest)
		}
		if f[4] == "" {
			return nil, fmt.Errorf("`show protocols` line %d %q: want name, proto, table, state and since", header+i+2, l.text)
		}
		since := f[4]
		if dateToken.MatchString(since) {
			if t, after := nextField(rest); timeToken.MatchString(t) {
				since, rest = since+" "+t, after
			}
		}
		protos = append(protos, Protocol{Name: f[0], Proto: f[1], Table: f[2], State: f[3], Since: since, Info: strings.TrimSpace(rest)})
	}
	return protos, nil
}

// nextField returns the first whitespace-separated field of s and the rest
// after it, with the rest's inner spacing kept.
func nextField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t")
	end := strings.IndexAny(s, " \t")
	if end < 0 {
		return s, ""
	}
	return s[:end], s[end:]
}

var (
	waitingLine   = regexp.MustCompile(`^Waiting for (\d+) (\w+) to recover$`)
	waitTimerLine = regexp.MustCompile(`^Wait timer is ([0-9.]+)/([0-9.]+)$`)
	versionLine   = regexp.MustCompile(`^BIRD (\d+\.\d+(\.\d+)?\S*)$`)
)

// ParseShowStatus parses `birdc show status` of BIRD 1.6 or 2, plain or
// with reply codes. Unknown lines are ignored so that a newer BIRD does not
// break the reader; the version line is required.
func ParseShowStatus(out string) (Status, error) {
	lines, err := splitReply(out)
	if err != nil {
		return Status{}, err
	}
	var s Status
	for _, l := range lines {
		text := strings.TrimSpace(l.text)
		if m := versionLine.FindStringSubmatch(text); m != nil && s.Version == "" {
			s.Version = m[1]
			continue
		}
		if v, ok := strings.CutPrefix(text, "Router ID is "); ok {
			id, err := netip.ParseAddr(v)
			if err != nil {
				return Status{}, fmt.Errorf("`show status`: router id %q: %w", v, err)
			}
			s.RouterID = id
			continue
		}
		if v, ok := strings.CutPrefix(text, "Hostname is "); ok {
			s.Hostname = v
			continue
		}
		if v, ok := strings.CutPrefix(text, "Current server time is "); ok {
			s.ServerTime = v
			continue
		}
		if v, ok := strings.CutPrefix(text, "Last reboot on "); ok {
			s.LastReboot = v
			continue
		}
		if v, ok := strings.CutPrefix(text, "Last reconfiguration on "); ok {
			s.LastReconfiguration = v
			continue
		}
		if text == "Graceful restart recovery in progress" {
			s.GracefulRestart = &GracefulRestartStatus{}
			continue
		}
		if m := waitingLine.FindStringSubmatch(text); m != nil && s.GracefulRestart != nil {
			s.GracefulRestart.Waiting, _ = strconv.Atoi(m[1])
			s.GracefulRestart.WaitingUnit = m[2]
			continue
		}
		if m := waitTimerLine.FindStringSubmatch(text); m != nil && s.GracefulRestart != nil {
			if s.GracefulRestart.Remaining, err = seconds(m[1]); err == nil {
				s.GracefulRestart.Wait, err = seconds(m[2])
			}
			if err != nil {
				return Status{}, fmt.Errorf("`show status`: %q: %w", text, err)
			}
			continue
		}
		if strings.HasPrefix(text, "Daemon is ") || strings.HasSuffix(text, " in progress") {
			s.Daemon = text
		}
	}
	if s.Version == "" {
		return Status{}, fmt.Errorf("no `BIRD <version>` line in `show status` output: %.80q", out)
	}
	return s, nil
}

// seconds parses BIRD's "54" or "53.998" into a duration.
func seconds(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond), nil
}

// birdLayouts are the time layouts BIRD prints with its ISO time formats
// (`timeformat ... iso short|long [ms]`, the defaults of BIRD 1.6 and 2).
var (
	birdDateTimeLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05", "2006-01-02 15:04"}
	birdTimeLayouts     = []string{"15:04:05.999999999", "15:04:05", "15:04"}
)

// SinceTime turns the since column of `show protocols` into an absolute
// time. BIRD prints local times, in a format that depends on its version,
// its `timeformat` and the age of the event (the ISO short formats print
// only the time within 20 hours, only the date beyond). Rather than guess
// BIRD's time zone, SinceTime measures since against BIRD's own clock,
// serverTime (`show status`: "Current server time is ..."), and places the
// difference before readAt, when the agent read them:
//
//   - "15:40:39" or "15:40:39.123": the latest such time not after the
//     server time (BIRD prints a bare time only for the last 20 hours);
//   - "2026-11-29 15:40:39": exactly;
//   - "2026-11-29": midnight of that day, a lower bound: a session this
//     old can never count as newer than a recent event.
//
// An error means the value is in none of these forms; the caller treats
// the time as unknown.
func SinceTime(since, serverTime string, readAt time.Time) (time.Time, error) {
	server, err := parseBirdTime(serverTime, birdDateTimeLayouts)
	if err != nil {
		return time.Time{}, fmt.Errorf("BIRD server time %q: want \"YYYY-MM-DD hh:mm:ss\"", serverTime)
	}
	since = strings.TrimSpace(since)
	var at time.Time
	switch {
	case dateToken.MatchString(since):
		at, err = time.Parse("2006-01-02", since)
	case strings.Contains(since, " "):
		at, err = parseBirdTime(since, birdDateTimeLayouts)
	default:
		var clock time.Time
		clock, err = parseBirdTime(since, birdTimeLayouts)
		if err == nil {
			y, m, d := server.Date()
			at = time.Date(y, m, d, clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), time.UTC)
			if at.After(server) {
				at = at.AddDate(0, 0, -1)
			}
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("BIRD since %q: not a date, a time or both", since)
	}
	return readAt.Add(-server.Sub(at)), nil
}

func parseBirdTime(v string, layouts []string) (time.Time, error) {
	v = strings.TrimSpace(v)
	var err error
	for _, l := range layouts {
		var t time.Time
		if t, err = time.Parse(l, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}
