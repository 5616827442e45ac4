// Command rebound-bench measures rebound's scenarios with real daemons and
// prints tables of the results.
//
//	go run ./cmd/rebound-bench s4 [flags]
//	go run ./cmd/rebound-bench scale [--nodes 100]
//	go run ./cmd/rebound-bench detect [--nodes 30,300]
//
// s4: BGP recovery of a returning node (seed 003) with and without the
// health-aware peer set, for several cluster sizes, with real BIRD.
//
// scale: the live recovery controller on a large kwok sandbox
// (internal/lab/scale).
//
// detect: two-plane detection (S13) with upstream's default timings, and
// the gossip's load per agent and detection time by membership size.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"rebound/pkg/exitcode"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitcode.BadInput)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "s4":
		err = runS4(ctx, os.Args[2:])
	case "scale":
		err = runScale(ctx, os.Args[2:])
	case "detect":
		err = runDetect(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "rebound-bench: unknown benchmark %q\n\n", os.Args[1])
		usage()
		os.Exit(exitcode.BadInput)
	}
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	os.Exit(exitcode.Report(os.Stderr, "rebound-bench: ", err, exitcode.Failed))
}

// parseFlags parses a benchmark's flags. A bad flag is bad input, said
// once, in main's one line; -h prints the flags and ends with exit 0.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return exitcode.Usage(fmt.Errorf("%w (run \"rebound-bench %s -h\" for its flags)", err, fs.Name()))
	}
	return nil
}

func usage() {
	fmt.Fprint(os.Stderr, `Usage: rebound-bench BENCHMARK [flags]

Benchmarks:
  s4   recovery time of a BGP node returning while half the nodes are dead
       (BIRD graceful restart, seed 003), with and without rebound's peer
       set, for given sizes and return times. Needs BIRD (hack/install-bird.sh); as
       root it also measures the kernel routing table in network namespaces.
       Run "rebound-bench s4 -h" for its flags.
  scale
       the live recovery controller on 100, 300 and 1,000 kwok nodes with
       20 pods each: memory, CPU and API requests at rest, deadline-to-delete
       of 200 stranded critical pods, planning pass. "--nodes 100" runs one
       size in a few minutes. Run "rebound-bench scale -h" for its flags.
  detect
       S13 (a node dies outright) with upstream's default timings, without
       and with two-plane detection: death to verdict, to the endpoint off,
       to the replacement Ready; then gossip bytes per second per agent and
       death-to-quorum at 30 and 300 members. Run "rebound-bench detect -h".

Exit codes: 0 measured, 1 a run failed, 2 bad input (an unknown benchmark or flag).
`)
}
