package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// TestKlogGoesToTheLogger: client-go's and leader election's klog lines
// come out of the same handler, in its format, filtered by the same -v.
func TestKlogGoesToTheLogger(t *testing.T) {
	var buf bytes.Buffer
	l := &Flags{Format: "json", Verbosity: 2}
	logger, _, err := l.Setup(&buf)
	if err != nil {
		t.Fatal(err)
	}
	defer klog.ClearLogger()
	logger.Info("from slog")
	klog.V(2).InfoS("from klog", "lease", "rebound-controller")
	klog.V(3).InfoS("too verbose")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (slog, klog V(2); not V(3)):\n%s", len(lines), buf.String())
	}
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not JSON: %q", line)
		}
	}
	if !strings.Contains(lines[1], `"msg":"from klog"`) || !strings.Contains(lines[1], `"lease":"rebound-controller"`) {
		t.Errorf("klog line = %q", lines[1])
	}
	if _, _, err := (&Flags{Format: "xml"}).Setup(&buf); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("bad format: err %v, want one naming --log-format", err)
	}
}
