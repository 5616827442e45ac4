package peering

import (
	"time"

	"rebound/pkg/liveness"
)

// The agents' reports and the rules of which ones count live in
// pkg/liveness, the one model of life and death every planner reads; the
// names below keep the peering API readable.
type (
	Report          = liveness.Report
	Session         = liveness.Session
	EvidenceOptions = liveness.Options
)

// BGP and BFD states the rules read.
const (
	StateEstablished = liveness.StateEstablished
	BFDUp            = liveness.BFDUp
	BFDDown          = liveness.BFDDown
)

// Defaults of the report rules.
const (
	DefaultReportMaxAge = liveness.DefaultReportMaxAge
	DefaultMaxClockSkew = liveness.DefaultMaxClockSkew
)

// CompactReport is liveness.CompactReport.
func CompactReport(reporter string, observedAt time.Time, generation int64, sessions []Session, ready func(peer string) bool) Report {
	return liveness.CompactReport(reporter, observedAt, generation, sessions, ready)
}
