package peering

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// The contract between the controller and the agents. Both live in the
// Kubernetes API, on the Node objects, so that neither needs to reach the
// other and `kubectl get nodes -L peering.rebound.dev/in-set` shows the set.
const (
	// LabelInSet publishes the peer set: the controller sets it to "true"
	// on every node in the set and to "false" on every other node it
	// manages. Agents watch the nodes with LabelInSet=true (a label
	// selector, so an agent's cache holds the set and nothing else), and
	// Calico's BGPPeer selects its peers with it.
	LabelInSet = "peering.rebound.dev/in-set"
	// AnnotationSessions is the agent's report of its BGP sessions, as JSON
	// (SessionReport), on its own Node.
	AnnotationSessions = "peering.rebound.dev/sessions"
	// AnnotationBGPPort, when set on a node, is the port its BIRD listens
	// on for BGP. Production nodes use 179 and leave it unset; it lets
	// several BIRDs share one host (tests, benchmarks).
	AnnotationBGPPort = "peering.rebound.dev/bgp-port"
	// AnnotationCalicoIPv4 is where Calico records a node's BGP address
	// ("10.0.0.5/24"); rebound reads it first, then the InternalIP.
	AnnotationCalicoIPv4 = "projectcalico.org/IPv4Address"
)

// SessionReport is what an agent reports about its node's BGP sessions.
//
// It is a node annotation rather than a CRD: an agent already has its Node
// and needs no new API type, RBAC stays "patch nodes" (which calico-node
// holds anyway), the report is deleted with the node, and it is visible in
// `kubectl describe node`. The cost is that every Node watcher sees the
// update, so agents write only when a session changes state and otherwise
// refresh at a slow interval (a minute by default); Time lets the
// controller drop a report that stopped being refreshed, which is exactly
// what happens when the node dies.
type SessionReport struct {
	// Time is when the agent read the sessions from BIRD.
	Time time.Time `json:"time"`
	// Sessions maps each peer in the set (node name) to its BGP state as
	// BIRD shows it: Established, Active, Connect, Idle, ... Nil when
	// BIRD could not be read.
	Sessions map[string]string `json:"sessions,omitempty"`
	// Error is why BIRD could not be read, empty when it was.
	Error string `json:"error,omitempty"`
}

// Established turns the report into the planner's form: peer name to
// "session Established". A report without sessions (BIRD unreadable)
// says nothing and gives nil.
func (r SessionReport) Established() map[string]bool {
	if r.Sessions == nil {
		return nil
	}
	out := make(map[string]bool, len(r.Sessions))
	for peer, state := range r.Sessions {
		out[peer] = state == "Established"
	}
	return out
}

// SameSessions reports whether two reports say the same about the
// sessions, whatever their times: the agent writes only when this is false
// or the last report is getting old.
func (r SessionReport) SameSessions(o SessionReport) bool {
	return r.Error == o.Error && (r.Sessions == nil) == (o.Sessions == nil) && maps.Equal(r.Sessions, o.Sessions)
}

// DefaultSessionReportMaxAge is how old an agent's session report may be
// and still count (for the peering controller and diagnose): three agent
// report intervals (a minute each by default), so one lost write does not
// drop a live node's report.
const DefaultSessionReportMaxAge = 3 * time.Minute

// Fresh reports whether the report is recent enough to trust at now: not
// older than maxAge and not more than maxAge in the future (clock skew).
func (r SessionReport) Fresh(now time.Time, maxAge time.Duration) bool {
	age := now.Sub(r.Time)
	return !r.Time.IsZero() && age <= maxAge && age >= -maxAge
}

// Encode returns the annotation value.
func (r SessionReport) Encode() string {
	data, err := json.Marshal(r)
	if err != nil {
		// A struct of strings and a time always marshals.
		panic(fmt.Sprintf("encode session report: %v", err))
	}
	return string(data)
}

// ParseSessionReport reads an AnnotationSessions value.
func ParseSessionReport(s string) (SessionReport, error) {
	var r SessionReport
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return SessionReport{}, fmt.Errorf("annotation %s: %w", AnnotationSessions, err)
	}
	if r.Time.IsZero() {
		return SessionReport{}, fmt.Errorf("annotation %s: no time", AnnotationSessions)
	}
	return r, nil
}
