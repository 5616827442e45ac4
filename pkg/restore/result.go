package restore

import (
	"errors"
	"time"

	"rebound/pkg/rescue"
)

// Result is what a bring-up did and found; `-o json` prints it.
type Result struct {
	Outcome  Outcome `json:"outcome"`
	ExitCode int     `json:"exitCode"`
	// Message sums the outcome up in one line.
	Message string    `json:"message"`
	Started time.Time `json:"started"`
	// ElapsedSeconds since Started; DeadlineSeconds is the budget.
	ElapsedSeconds  float64 `json:"elapsedSeconds"`
	DeadlineSeconds float64 `json:"deadlineSeconds"`
	Deadline        string  `json:"deadline"`
	Nodes           int     `json:"nodes"`
	ReadyNodes      int     `json:"readyNodes"`
	// LiveNodes are the Ready nodes whose Lease was seen renewing during
	// the bring-up: the only ones whose pods count, and the only targets.
	LiveNodes int `json:"liveNodes"`
	// StopSwitch is the stop switch ConfigMap read ("" when none), and
	// StopSwitchPulled whether it existed at the last read.
	StopSwitch       string `json:"stopSwitch,omitempty"`
	StopSwitchPulled bool   `json:"stopSwitchPulled,omitempty"`
	// Zones are the zone states as kube-controller-manager computes them.
	Zones []ZoneReport `json:"zones"`
	// Workloads are the essential workloads, sorted.
	Workloads []WorkloadStatus `json:"workloads"`
	// Stranded are the essential pods on NotReady nodes, as last planned.
	Stranded []PodReport `json:"strandedPods"`
	// Actions are the actions taken (or, in a dry run, planned).
	Actions  []ActionReport `json:"actions"`
	Warnings []string       `json:"warnings,omitempty"`
}

// ZoneReport is one zone's state.
type ZoneReport struct {
	Zone     string `json:"zone"`
	State    string `json:"state"`
	NotReady int    `json:"notReady"`
	Total    int    `json:"total"`
	// Rate is upstream's NoExecute-tainting rate (nodes/s); 0 means no pod
	// is evicted from the zone's NotReady nodes.
	Rate   float64 `json:"evictionRate"`
	Reason string  `json:"reason"`
}

// PodReport is one essential pod on a NotReady node.
type PodReport struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Node      string          `json:"node"`
	Workload  string          `json:"workload"`
	Decision  rescue.Decision `json:"decision"`
	Reason    string          `json:"reason"`
}

// ActionReport is one action.
type ActionReport struct {
	AtSeconds float64           `json:"atSeconds"`
	Kind      rescue.ActionKind `json:"kind"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Pod       string            `json:"pod,omitempty"`
	Node      string            `json:"node,omitempty"`
	// DryRun: planned, not applied (a dry run, a wait-only run, or the
	// stop switch; Outcome says which).
	DryRun bool `json:"dryRun,omitempty"`
	// Result is rescue.ResultSucceeded, AlreadyDone, Refused or Failed
	// ("" when not applied); Outcome says what happened in words.
	Result  string `json:"result,omitempty"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// Err returns nil on success and otherwise an *Error with the outcome's
// exit code and message.
func (r *Result) Err() error {
	if r.ExitCode == ExitOK {
		return nil
	}
	return &Error{Code: r.ExitCode, Err: errors.New(r.Message)}
}
