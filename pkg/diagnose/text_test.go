package diagnose

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestWriteText compares the human output with testdata/<name>.golden
// (go test ./pkg/diagnose -run TestWriteText -update rewrites them).
func TestWriteText(t *testing.T) {
	cases := map[string]func() *world{
		"s1": func() *world {
			w := s1(at(45 * time.Second))
			w.deployment("default", "not-critical", false, 0, "node-3")
			return w
		},
		"s5": func() *world { return s5(at(45 * time.Second)) },
		"s4": func() *world {
			w := newWorld(at(20 * time.Second))
			w.cluster(3, 1, 2)
			w.nodeNamed("node-0").Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(15 * time.Second))
			w.inSet("node-0", "true")
			w.inSet("node-1", "false")
			w.inSet("node-2", "true")
			w.report("node-0", at(18*time.Second), map[string]string{"node-2": "Active"})
			return w
		},
		"healthy": func() *world {
			w := newWorld(at(time.Minute))
			w.cluster(3)
			w.policy()
			return w
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteText(&buf, mk().explain()); err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(buf.String(), "\n") {
				if len(line) > textWidth && strings.Contains(line, " ") {
					t.Errorf("line %d is %d characters long: %q", i+1, len(line), line)
				}
			}
			golden := filepath.Join("testdata", "TestWriteText_"+name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if buf.String() != string(want) {
				t.Errorf("output differs from %s (-update rewrites it):\n%s", golden, buf.String())
			}
		})
	}
}
