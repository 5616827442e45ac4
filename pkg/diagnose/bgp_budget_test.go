package diagnose

import (
	"strings"
	"testing"
	"time"
)

func TestBudgetFor(t *testing.T) {
	tests := []struct {
		name      string
		agent     bool
		s         BGPSettings
		worst     float64
		by        string
		shortenOn string
	}{
		{"no agent: hold time, restart time, the whole wait", false, BGPSettings{}, 240 + 120 + 240, "hold time", "rebound agent"},
		{"agent with BFD: the restart time dominates", true, BGPSettings{}, 0.9 + 120, "BFD", "graceful restart time"},
		{"agent without BFD: the hold time dominates", true, BGPSettings{NoBFD: true}, 240 + 120, "hold time", "--bfd"},
		{"agent, short restart time, no BFD", true, BGPSettings{NoBFD: true, GracefulRestartTime: 10 * time.Second}, 240 + 10, "hold time", "--bfd"},
		{"agent, BFD, restart time 10 s", true, BGPSettings{GracefulRestartTime: 10 * time.Second, BFDDetection: 300 * time.Millisecond}, 10.3, "BFD", "graceful restart time"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := budgetFor("n", tc.agent, tc.s.withDefaults())
			if diff := b.WorstCaseSeconds - tc.worst; diff > 0.001 || diff < -0.001 {
				t.Errorf("worst case %v s, want %v s (%+v)", b.WorstCaseSeconds, tc.worst, b)
			}
			if b.DetectedBy != tc.by {
				t.Errorf("detected by %q, want %q", b.DetectedBy, tc.by)
			}
			if !strings.Contains(b.Shorten, tc.shortenOn) {
				t.Errorf("shorten %q does not name %q", b.Shorten, tc.shortenOn)
			}
		})
	}
}
