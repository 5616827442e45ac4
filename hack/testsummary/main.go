// Command testsummary reads `go test -json` on stdin, prints the output as
// `go test -v` would, and ends with a summary of every failed test: its own
// messages (the t.Log, t.Error and t.Fatal lines), last ones first cut.
//
// The e2e suite runs tests in parallel and dumps component logs when one
// fails, so the assertion that failed can sit thousands of lines above the
// end of a CI log, and a log kept by its tail loses it. The summary puts it
// back at the end. `make test` pipes the e2e run through it; the exit status
// stays go test's (the Makefile sets pipefail), and this command also exits
// 1 when it saw a failure.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// event is the subset of cmd/test2json's TestEvent this command reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// keepMessages and keepPackageLines bound what the summary holds per failed
// test and per failed package: enough for the assertion and its context.
const (
	keepMessages     = 20
	keepPackageLines = 30
)

// message matches the first line of a testing message: four spaces (or more
// for subtests), file:line, colon. Continuation lines of multi-line
// messages (a dumped log) do not match, so a dump cannot crowd out the
// assertion.
var message = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

type key struct{ pkg, test string }

// summary collects what is printed at the end.
type summary struct {
	messages map[key][]string // each test's messages, the last keepMessages
	pkgLines map[string][]string
	failed   []key // tests and packages (test "") in the order they failed
}

func newSummary() *summary {
	return &summary{messages: map[key][]string{}, pkgLines: map[string][]string{}}
}

func keepLast(lines []string, line string, n int) []string {
	lines = append(lines, line)
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

func (s *summary) add(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		line := strings.TrimRight(e.Output, "\n")
		if e.Test == "" {
			s.pkgLines[e.Package] = keepLast(s.pkgLines[e.Package], line, keepPackageLines)
		} else if message.MatchString(line) {
			s.messages[k] = keepLast(s.messages[k], line, keepMessages)
		}
	case "fail", "build-fail":
		s.failed = append(s.failed, k)
	}
}

func (s *summary) write(w io.Writer) {
	if len(s.failed) == 0 {
		return
	}
	testFailed := map[string]bool{}
	for _, k := range s.failed {
		if k.test != "" {
			testFailed[k.pkg] = true
		}
	}
	fmt.Fprintln(w, "\n== FAILED; the last messages of each failed test:")
	for _, k := range s.failed {
		switch {
		case k.test != "":
			fmt.Fprintf(w, "--- FAIL %s %s\n", k.pkg, k.test)
			for _, l := range s.messages[k] {
				fmt.Fprintln(w, l)
			}
		case !testFailed[k.pkg]:
			// No test to blame (a build error, a panic or timeout
			// outside a test): the package's own last lines say why.
			fmt.Fprintf(w, "--- FAIL %s (no failed test); its last lines:\n", k.pkg)
			for _, l := range s.pkgLines[k.pkg] {
				fmt.Fprintln(w, "    "+l)
			}
		}
	}
}

// run copies the output of the events on r to w, then the summary, and
// reports whether anything failed. A line that is not an event (go test's
// own errors before the run) is copied as it is.
func run(r io.Reader, w io.Writer) (failed bool, err error) {
	s := newSummary()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text())
			continue
		}
		if e.Action == "output" || e.Action == "build-output" {
			io.WriteString(w, e.Output)
		}
		s.add(e)
	}
	s.write(w)
	return len(s.failed) > 0, sc.Err()
}

func main() {
	failed, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary: reading go test -json:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
