// Package pkg holds only this test: the rule that rebound's libraries
// (pkg/...) never import rebound's internal packages, which may import
// them (the commands, the controller, the lab). A pkg that needs a
// cobra command or a flag of internal/cli is a command: it belongs under
// internal/cli.
package pkg

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

func TestPkgImportsNoInternal(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Deps", "rebound/pkg/...")
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	libraries := 0
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		// Only rebound's pkg/... as linked into a binary (their tests
		// may use the harnesses of internal/lab and internal/testing):
		// -deps also prints every package they depend on.
		if !strings.HasPrefix(p.ImportPath, "rebound/pkg/") {
			continue
		}
		libraries++
		for _, d := range p.Deps {
			if d == "rebound/internal" || strings.HasPrefix(d, "rebound/internal/") {
				t.Errorf("%s depends on %s: rebound/pkg must not import rebound/internal", p.ImportPath, d)
				break
			}
		}
	}
	if libraries < 10 {
		t.Fatalf("go list printed %d of rebound's pkg/ packages; expected all of them", libraries)
	}
}
