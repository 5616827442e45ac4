package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"

	"rebound/hack"
	"rebound/internal/lab/birdproc"
	"rebound/pkg/peering/bird"
)

// ensureBird makes BIRD 1.6 available for S4 the way `make test` does:
// when it is missing and this process runs as root on a machine with
// apt-get, it runs hack/install-bird.sh (embedded) and prints what it
// installs; otherwise it says how to install it. S4 is then played or
// reported as not played; the sandbox scenarios never depend on it.
func ensureBird(ctx context.Context, opts Options) {
	if _, err := birdproc.Find(bird.Bird16); err == nil || !opts.InstallDeps {
		return
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		fmt.Fprintf(opts.Progress, "S4 needs BIRD, which is not installed; not root or no apt-get, so the demo does not install it: %s\n", birdproc.InstallHint)
		return
	}
	fmt.Fprintf(opts.Progress, "S4 needs BIRD 1.6 and BIRD 2 (Debian packages bird and bird2), which are missing: installing them as make test does\n")
	fmt.Fprintf(opts.Progress, "(hack/install-bird.sh: apt-get install bird with service starts denied, bird2 unpacked into /opt/rebound/bird2; --install-deps=false skips this)\n")
	cmd := exec.CommandContext(ctx, "bash", "-s")
	cmd.Stdin = bytes.NewReader(hack.InstallBird)
	cmd.Stdout, cmd.Stderr = opts.Progress, opts.Progress
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(opts.Progress, "installing BIRD failed (%v); S4 will not be played\n", err)
	}
}
