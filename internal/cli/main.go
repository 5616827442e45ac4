package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"rebound/internal/logging"
	"rebound/pkg/exitcode"
)

// Main is every binary's main: it runs root until it returns or SIGINT or
// SIGTERM ends its context, and exits with the code of the error it
// returned. It does not return.
func Main(root *cobra.Command, prefix string, fallback int) {
	// Before anything can log through controller-runtime: otherwise it
	// prints a stack trace into the user's output (see internal/logging).
	logging.Install(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, root, os.Stderr, prefix, fallback)
	stop()
	os.Exit(code)
}

// Run executes root with ctx and returns its exit code: the error, if
// any, written once to stderr after prefix (exitcode.Report), and its
// code, fallback for an error that carries none.
func Run(ctx context.Context, root *cobra.Command, stderr io.Writer, prefix string, fallback int) int {
	return exitcode.Report(stderr, prefix, root.ExecuteContext(ctx), fallback)
}
