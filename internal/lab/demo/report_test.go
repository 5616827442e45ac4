package demo

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestHTMLReportGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, ExampleReport()); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden.html")
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
		t.Fatalf("%v (run go test ./internal/lab/demo -run TestHTMLReportGolden -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		got := filepath.Join(t.TempDir(), "report.html")
		_ = os.WriteFile(got, buf.Bytes(), 0o644)
		t.Errorf("HTML differs from %s (got %s); if intended, rerun with -update", golden, got)
	}
}

func TestHTMLReportSelfContainedAndEscaped(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, ExampleReport()); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []string{"http:", "https:", "src=", "href=", "url(", "@import", "<script", "<never"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q", bad)
		}
	}
	for _, want := range []string{
		"&lt;never &#34;moved&#34;&gt; &amp; co", // event text escaped
		"32.0s (on node-0)",                      // the table
		"recovered (32.0s)",                      // the recovery moment
		"not recovered",                          // the lane that did not
		`class="zone-partial"`,                   // zone state
		`class="bgp-up"`, `class="bgp-wait"`,     // BGP sessions
		`class="pod-terminating"`, // pod markers
		"node-3 NotReady",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, "<svg"); n != 4 {
		t.Errorf("%d charts, want 4 (one per lane)", n)
	}
}

func TestWriteHTMLFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.html")
	if err := WriteHTMLFile(path, ExampleReport()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Fatalf("read back: %v, %.40q", err, b)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".rebound-demo-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
