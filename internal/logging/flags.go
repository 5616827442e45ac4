package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// Flags are the logging flags the long-running commands (controller,
// agent) share: --log-format text|json and -v.
type Flags struct {
	Format    string
	Verbosity int
	// level is the agent's older --log-level, kept as a deprecated alias.
	level string
}

// AddFlags registers --log-format and -v (and the deprecated
// --log-level) on cmd.
func AddFlags(cmd *cobra.Command) *Flags {
	l := &Flags{}
	f := cmd.Flags()
	f.StringVar(&l.Format, "log-format", "text", "log format: text or json")
	f.IntVarP(&l.Verbosity, "v", "v", 0, "log verbosity: 0 = actions, changes and errors; 2 = client-go and leader election details; 4 = debug")
	f.StringVar(&l.level, "log-level", "", "debug, info, warn or error")
	_ = f.MarkDeprecated("log-level", "use -v (debug is -v 4)")
	return l
}

// Setup builds the logger on w and routes klog (client-go, leader
// election) to it, with klog's verbosity set to -v, so that every line of
// the process has one format. It returns the logger as slog and logr.
func (l *Flags) Setup(w io.Writer) (*slog.Logger, logr.Logger, error) {
	level := slog.Level(-l.Verbosity)
	if l.level != "" {
		if err := level.UnmarshalText([]byte(l.level)); err != nil {
			return nil, logr.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch l.Format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, logr.Logger{}, fmt.Errorf("--log-format %q is not supported: use text or json", l.Format)
	}
	logger := slog.New(h)
	klog.SetSlogLogger(logger)
	// klog filters V(n) lines by its own -v before they reach the logger.
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	v := -int(level)
	if v < 0 {
		v = 0
	}
	_ = fs.Set("v", strconv.Itoa(v))
	return logger, logr.FromSlogHandler(h), nil
}
