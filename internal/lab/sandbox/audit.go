package sandbox

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditLog is the name of the apiserver's audit log (LogPath(AuditLog)).
const AuditLog = "audit"

// auditPolicyYAML records, at Metadata level, only what a scenario wants
// to count: pod deletions, changes to workloads, writes of Node objects
// (not their status, and with their bodies), and every request of rebound's own identity. Everything else is left out so the log stays
// small.
//
//go:embed audit-policy.yaml
var auditPolicyYAML []byte

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type AuditEvent struct {
	Verb  string `json:"verb"`
	Stage string `json:"stage"`
	// StageTimestamp is when the request completed (for the
	// ResponseComplete stage); RequestReceivedTimestamp when it arrived.
	StageTimestamp           metav1.MicroTime `json:"stageTimestamp"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
	User                     struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestObject is the request's body, logged for Node updates and
	// patches only (a patch's own body for a patch).
	RequestObject json.RawMessage `json:"requestObject,omitempty"`
}

// AuditEvents returns the completed requests the apiserver has logged so
// far that match keep.
func (c *Cluster) AuditEvents(keep func(AuditEvent) bool) ([]AuditEvent, error) {
	f, err := os.Open(c.LogPath(AuditLog))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var e AuditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" {
			continue
		}
		if keep(e) {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// WaitAuditEvents reads the audit log every 100 ms until done holds for
// the events matching keep, or ctx ends, and returns the last read (with
// ctx's error when done never held). The apiserver logs a request's
// ResponseComplete stage after it has answered, so a watch can see a
// write before the log holds it: a test that counts what it just saw
// happen waits for it.
func (c *Cluster) WaitAuditEvents(ctx context.Context, keep func(AuditEvent) bool, done func([]AuditEvent) bool) ([]AuditEvent, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		evs, err := c.AuditEvents(keep)
		if err != nil {
			return nil, err
		}
		if done(evs) {
			return evs, nil
		}
		select {
		case <-ctx.Done():
			return evs, ctx.Err()
		case <-tick.C:
		}
	}
}
