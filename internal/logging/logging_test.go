package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
)

func TestSwitch(t *testing.T) {
	var stderr, file bytes.Buffer
	Install(&stderr)
	log := ctrl.Log.WithName("lib").WithValues("k", "v")
	log.Info("hidden before Set: below error level")
	log.Error(nil, "shown")
	if strings.Contains(stderr.String(), "hidden") || !strings.Contains(stderr.String(), "shown") {
		t.Errorf("default handler output %q: want errors only", stderr.String())
	}
	Set(slog.NewTextHandler(&file, nil))
	log.Info("to the file")
	if !strings.Contains(file.String(), "to the file") || !strings.Contains(file.String(), "k=v") {
		t.Errorf("after Set, file = %q; want the line with its values", file.String())
	}
	if strings.Contains(stderr.String(), "to the file") {
		t.Errorf("stderr got a line after Set: %q", stderr.String())
	}
}
