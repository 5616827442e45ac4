package fencing

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"rebound/api/v1alpha1"
)

// DocumentKey is the key of the fencing document in the ConfigMap the
// controller publishes it in.
const DocumentKey = "fencing.json"

// DefaultDocumentName is the ConfigMap, in the controller's namespace,
// that carries the document: the controller writes it, the agents and
// diagnose read it.
const DefaultDocumentName = "rebound-fencing"

// Document is what the controller publishes for the agents: the member
// list they count against, and the open fencing rounds they answer.
type Document struct {
	List   List           `json:"list"`
	Rounds []RoundRequest `json:"rounds,omitempty"`
}

// RoundRequest asks every agent to testify about Node in round Round.
type RoundRequest struct {
	Node  string `json:"node"`
	Round string `json:"round"`
}

// Limits of a document: the same as the API's for a report.
const (
	maxMembers  = 5000
	maxRoundLen = 300
)

// ParseDocument decodes and validates a published document. The agents
// read it from the API, so it is untrusted: an invalid one changes
// nothing (the agent keeps its list and answers no round).
func ParseDocument(data []byte) (Document, error) {
	var d Document
	if err := json.Unmarshal(data, &d); err != nil {
		return Document{}, fmt.Errorf("fencing document: %w", err)
	}
	if err := d.Validate(); err != nil {
		return Document{}, err
	}
	return d, nil
}

// Validate checks a document's fields, naming the first that is wrong.
func (d Document) Validate() error {
	if d.List.Number < 1 {
		return fmt.Errorf("fencing document: list.number=%d: must be at least 1", d.List.Number)
	}
	if len(d.List.Members) > maxMembers {
		return fmt.Errorf("fencing document: list.members: %d members, at most %d", len(d.List.Members), maxMembers)
	}
	seen := map[string]bool{}
	for i, m := range d.List.Members {
		if errs := validation.IsDNS1123Subdomain(m); len(errs) > 0 {
			return fmt.Errorf("fencing document: list.members[%d]=%q: not a node name: %s", i, m, errs[0])
		}
		if seen[m] {
			return fmt.Errorf("fencing document: list.members[%d]=%q: listed twice", i, m)
		}
		seen[m] = true
	}
	if len(d.Rounds) > maxMembers {
		return fmt.Errorf("fencing document: rounds: %d rounds, at most %d", len(d.Rounds), maxMembers)
	}
	for i, r := range d.Rounds {
		if errs := validation.IsDNS1123Subdomain(r.Node); len(errs) > 0 {
			return fmt.Errorf("fencing document: rounds[%d].node=%q: not a node name: %s", i, r.Node, errs[0])
		}
		if r.Round == "" || len(r.Round) > maxRoundLen {
			return fmt.Errorf("fencing document: rounds[%d].round: must be 1 to %d characters", i, maxRoundLen)
		}
	}
	return nil
}

// Encode returns the document as published.
func (d Document) Encode() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(d)
}

// ReportFromAPI is what the Fencer compares of an agent's report read by
// quorum: version is the PeeringReport's resourceVersion. A nil report
// (no fencing block) is nil.
func ReportFromAPI(version string, r *v1alpha1.FencingReport) *Report {
	if r == nil {
		return nil
	}
	out := &Report{
		Version: version,
		Armed:   r.Armed,
		Timing:  Timing{Watchdog: time.Duration(r.WatchdogSeconds) * time.Second, Sanction: time.Duration(r.SanctionSeconds) * time.Second},
		BootID:  r.BootID,
	}
	for _, l := range r.Lists {
		out.Lists = append(out.Lists, List{Number: l.Number, Members: slices.Clone(l.Members)})
	}
	if out.Timing.Watchdog <= 0 || out.Timing.Sanction <= 0 {
		// A report that names no timing cannot be waited out.
		out.Armed = false
	}
	return out
}

// TestimoniesAbout collects the answers about node from every agent's
// report. renewing says whether the controller sees an agent's node's
// Lease renewing. An agent never testifies about its own node.
func TestimoniesAbout(node string, reports []v1alpha1.PeeringReport, renewing func(member string) bool) []Testimony {
	var out []Testimony
	for i := range reports {
		r := &reports[i]
		if r.Fencing == nil || r.Name == node {
			continue
		}
		for _, t := range r.Fencing.Testimonies {
			if t.Node != node {
				continue
			}
			out = append(out, Testimony{Member: r.Name, Round: t.Round,
				SilentFor: time.Duration(t.SilentForMilliseconds) * time.Millisecond, LeaseRenewing: renewing(r.Name)})
		}
	}
	return out
}

// NextDocument is the document to publish after prev: the member list is
// members (sorted, without repeats) under prev's number, or the next
// number when the members changed; the rounds are rounds.
func NextDocument(prev Document, members []string, rounds []RoundRequest) Document {
	m := slices.Clone(members)
	slices.Sort(m)
	m = slices.Compact(m)
	next := Document{List: List{Number: max(prev.List.Number, 1), Members: m}, Rounds: rounds}
	if prev.List.Number > 0 && !slices.Equal(prev.List.Members, m) {
		next.List.Number = prev.List.Number + 1
	}
	return next
}

// The annotations rebound writes on a Node it fences, beside the
// out-of-service taint.
const (
	// AnnotationFencedBoot is the boot ID the taint fences: written with
	// the taint, it marks the taint as rebound's, and the taint comes off
	// only once the node runs another boot.
	AnnotationFencedBoot = "fencing.rebound.dev/fenced-boot-id"
	// AnnotationVerified names the round whose re-read after the taint
	// found nothing changed: only then does a rebound taint let pods be
	// force-deleted.
	AnnotationVerified = "fencing.rebound.dev/verified"
	// OutOfServiceValue is the value of the taint rebound puts on
	// (upstream's documented example).
	OutOfServiceValue = "nodeshutdown"
)
