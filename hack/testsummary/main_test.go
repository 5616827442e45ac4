package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A real `go test -json` run of a module whose failing test logs its
// assertion and then dumps a long log, as the e2e tests do.
const failingModule = `package demo

import (
	"strings"
	"testing"
)

func TestPasses(t *testing.T) { t.Log("fine") }

func TestFails(t *testing.T) {
	t.Parallel()
	t.Cleanup(func() { t.Logf("component log:\n%s", strings.Repeat("a dumped line\n", 200)) })
	t.Errorf("deletions = %d, want %d", 2, 1)
}

func TestAlsoPasses(t *testing.T) {
	t.Parallel()
	t.Log("also fine")
}
`

func goTestJSON(t *testing.T, src string) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":       "module demo\n\ngo 1.26\n",
		"demo_test.go": src,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-json", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, _ := cmd.Output() // fails by design; the events are the subject
	return out
}

func TestSummaryEndsWithTheAssertion(t *testing.T) {
	in := goTestJSON(t, failingModule)
	var out bytes.Buffer
	failed, err := run(bytes.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Fatalf("failed = false for a run with a failing test; output:\n%s", out.String())
	}
	text := out.String()
	if !strings.Contains(text, "=== RUN   TestPasses") || !strings.Contains(text, "a dumped line") {
		t.Errorf("the -v output is not passed through:\n%s", text)
	}
	i := strings.LastIndex(text, "== FAILED")
	if i < 0 {
		t.Fatalf("no summary at the end:\n%s", text)
	}
	tail := text[i:]
	for _, want := range []string{"--- FAIL demo TestFails", "deletions = 2, want 1", "component log:"} {
		if !strings.Contains(tail, want) {
			t.Errorf("summary lacks %q:\n%s", want, tail)
		}
	}
	for _, unwanted := range []string{"a dumped line", "TestPasses", "also fine", "no failed test"} {
		if strings.Contains(tail, unwanted) {
			t.Errorf("summary carries %q:\n%s", unwanted, tail)
		}
	}
}

func TestSummaryNamesABrokenPackage(t *testing.T) {
	in := goTestJSON(t, "package demo\n\nfunc broken( {\n")
	var out bytes.Buffer
	failed, err := run(bytes.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !failed || !strings.Contains(text, "== FAILED") || !strings.Contains(text, "no failed test") || !strings.Contains(text, "demo_test.go:3") {
		t.Errorf("failed = %v; want a summary naming the syntax error:\n%s", failed, text)
	}
}

func TestPassingRunHasNoSummary(t *testing.T) {
	in := goTestJSON(t, "package demo\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n")
	var out bytes.Buffer
	failed, err := run(bytes.NewReader(in), &out)
	if err != nil || failed || strings.Contains(out.String(), "failed") {
		t.Errorf("failed = %v, err = %v, output:\n%s", failed, err, out.String())
	}
	if !strings.Contains(out.String(), "--- PASS: TestOK") {
		t.Errorf("the -v output is not passed through:\n%s", out.String())
	}
}
