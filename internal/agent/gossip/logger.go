package gossip

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// memberlist logs through a *log.Logger, each line "[LEVEL] memberlist:
// message". slogWriter turns those lines into records of the agent's
// logger, so that they share its format, its -v and its node attribute.
// memberlist's INFO lines (every suspicion, every failure it declares,
// once per agent) are one step below the agent's own: -v 2 shows them.
type slogWriter struct{ log *slog.Logger }

const levelMemberlistInfo = slog.LevelInfo - 2

func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l.With("component", "memberlist")}, "", 0)
}

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, msg, ok := strings.Cut(rest, "]"); ok {
			line = strings.TrimSpace(msg)
			switch tag {
			case "DEBUG", "TRACE":
				level = slog.LevelDebug
			case "INFO":
				level = levelMemberlistInfo
			case "WARN":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			}
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if level == slog.LevelWarn && strings.HasPrefix(line, "ignoring alive message") {
		// A refused member is announced every gossip round; the alive
		// delegate logs its refusals, rate-limited.
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}
