// Package logging is how rebound's commands log: the flags that build
// their slog handler and route klog (client-go, leader election) to it
// (flags.go), and the routing of controller-runtime's logr logs to a
// handler chosen by the command that runs (this file).
//
// controller-runtime accepts its logger only once per process, and prints
// a stack trace ("log.SetLogger(...) was never called") when a library
// logs before it is set; so cmd/rebound installs this package's handler
// first thing, and each command points it where its logs belong (stderr
// for the controller, a file for the demo's controller).
package logging

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

var (
	target atomic.Pointer[slog.Handler]
	hooked sync.Once
)

// Install makes controller-runtime log through this package's handler;
// until Set is called, only errors are printed, one line each, to stderr.
// Safe to call more than once, and after Set (which it then leaves alone).
func Install(stderr io.Writer) {
	h := slog.Handler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	target.CompareAndSwap(nil, &h)
	hook()
}

// Set sends every log from now on to h, and hooks controller-runtime up if
// Install was not called (a binary that only runs the controller).
func Set(h slog.Handler) {
	target.Store(&h)
	hook()
}

func hook() {
	hooked.Do(func() { ctrl.SetLogger(logr.FromSlogHandler(&switchHandler{})) })
}

// switchHandler forwards to the current target, replaying the attributes
// and groups it was derived with.
type switchHandler struct {
	derive func(slog.Handler) slog.Handler
}

func (s *switchHandler) current() slog.Handler {
	h := *target.Load()
	if s.derive != nil {
		h = s.derive(h)
	}
	return h
}

func (s *switchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.current().Enabled(ctx, l)
}

func (s *switchHandler) Handle(ctx context.Context, r slog.Record) error {
	return s.current().Handle(ctx, r)
}

func (s *switchHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return s.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(attrs) })
}

func (s *switchHandler) WithGroup(name string) slog.Handler {
	return s.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

func (s *switchHandler) with(f func(slog.Handler) slog.Handler) slog.Handler {
	prev := s.derive
	return &switchHandler{derive: func(h slog.Handler) slog.Handler {
		if prev != nil {
			h = prev(h)
		}
		return f(h)
	}}
}
