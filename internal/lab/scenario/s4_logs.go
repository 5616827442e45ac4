package scenario

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
)

// logLines turns the slog text lines of a component (the peering
// controller, an agent) into "log" events of a timeline, so that the demo
// shows what the real parts did, where they did it, beside the routes.
type logLines struct {
	tl  *Timeline
	who string

	mu  sync.Mutex
	buf []byte
}

func newLogLines(tl *Timeline, who string) *logLines { return &logLines{tl: tl, who: who} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if line := logLine(string(l.buf[:i])); line != "" {
			l.tl.Add("log", l.who, "%s", line)
		}
		l.buf = l.buf[i+1:]
	}
}

// logQuiet are the slog keys a timeline leaves out: the time is the
// event's, the controller is the event's subject, and controller-runtime's
// bookkeeping says nothing to a reader.
var logQuiet = map[string]bool{"time": true, "controller": true, "controllerGroup": true, "controllerKind": true, "reconcileID": true}

// logLine shortens one slog text line to its message and attributes,
// with the level only when it is not INFO.
func logLine(line string) string {
	var msg string
	var rest []string
	for _, f := range logFields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch {
		case logQuiet[k], k == "level" && v == "INFO", v == `""`:
		case k == "msg":
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			msg = v
		default:
			rest = append(rest, f)
		}
	}
	if msg == "" && len(rest) == 0 {
		return strings.TrimSpace(line)
	}
	return strings.TrimSpace(msg + " " + strings.Join(rest, " "))
}

// logFields splits a slog text line into key=value fields, a quoted value
// (with its escapes) kept whole.
func logFields(line string) []string {
	var out []string
	for i := 0; i < len(line); {
		if line[i] == ' ' {
			i++
			continue
		}
		start, quoted := i, false
		for ; i < len(line); i++ {
			c := line[i]
			if quoted && c == '\\' {
				i++
				continue
			}
			if c == '"' {
				quoted = !quoted
			}
			if c == ' ' && !quoted {
				break
			}
		}
		out = append(out, line[start:min(i, len(line))])
	}
	return out
}
