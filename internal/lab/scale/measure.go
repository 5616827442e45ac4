package scale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	"rebound/internal/controller"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/rescue"
)

// writeVerbs change state on the apiserver.
var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// Requests counts a user's API requests by verb from the apiserver's audit
// log, for those received in [from, to).
type Requests struct {
	ByVerb map[string]int
	// Writes counts every write; LeaseWrites those to the leader-election
	// Lease, which leader election renews every few seconds by design.
	Writes      int
	LeaseWrites int
	Window      time.Duration
}

// CountRequests reads the audit log of c. The audit policy records every
// request of sandbox.ReboundUser (internal/lab/sandbox/audit-policy.yaml).
func CountRequests(c *sandbox.Cluster, user string, from, to time.Time) (Requests, error) {
	r := Requests{ByVerb: map[string]int{}, Window: to.Sub(from)}
	_, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		at := e.RequestReceivedTimestamp.Time
		if e.User.Username != user || at.Before(from) || !at.Before(to) {
			return false
		}
		r.ByVerb[e.Verb]++
		if writeVerbs[e.Verb] {
			if e.ObjectRef.Resource == "leases" {
				r.LeaseWrites++
			} else {
				r.Writes++
			}
		}
		return false
	})
	return r, err
}

// PerMinute scales a count in the window to a rate per minute.
func (r Requests) PerMinute(n int) float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(n) / r.Window.Minutes()
}

// Percentile is the nearest-rank percentile (0 < p <= 100) of xs.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// ProcSample is a process's memory and CPU time at one moment.
type ProcSample struct {
	At         time.Time
	RSSMiB     float64
	PeakMiB    float64
	CPUSeconds float64
}

// SampleProc reads /proc/PID/status and /proc/PID/stat.
func SampleProc(pid int) (ProcSample, error) {
	rss, peak := sandbox.ProcessMemoryKiB(pid)
	cpu, err := sandbox.ProcessCPUSeconds(pid)
	return ProcSample{At: time.Now(), RSSMiB: float64(rss) / 1024, PeakMiB: float64(peak) / 1024, CPUSeconds: cpu}, err
}

// ResetPeak restarts the process's peak RSS (VmHWM) from its current RSS
// (Linux: "5" to /proc/PID/clear_refs), so that a later sample's PeakMiB
// is the peak of what came after, not of the start-up.
func ResetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// CPUPerMinute is the CPU seconds used per minute between two samples.
func CPUPerMinute(a, b ProcSample) float64 {
	d := b.At.Sub(a.At)
	if d <= 0 {
		return 0
	}
	return (b.CPUSeconds - a.CPUSeconds) / d.Minutes()
}

// ownDeadlines reads a JSON controller log for its first delete of each
// pod (namespace/name) and the deadline the controller logged with it:
// the policy's maxUnavailableTime from the controller's first sight of
// the node's NotReady, on the controller's clock, which on the sandbox is
// the apiserver's.
func ownDeadlines(log string) (map[string]time.Time, error) {
	f, err := os.Open(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var rec struct {
			Msg      string `json:"msg"`
			Action   string `json:"action"`
			Object   string `json:"object"`
			Deadline string `json:"deadline"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Msg != controller.LogMessageRescueAction {
			continue
		}
		if rec.Action != string(rescue.ActionDelete) || rec.Deadline == "" {
			continue
		}
		if _, seen := out[rec.Object]; seen {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, rec.Deadline)
		if err != nil {
			return nil, fmt.Errorf("%s: %s of %s: %w", log, controller.LogKeyDeadline, rec.Object, err)
		}
		out[rec.Object] = at
	}
	return out, sc.Err()
}
