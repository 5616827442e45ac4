package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
	"rebound/pkg/rescue/execute"
)

// The log line of every applied rescue action, and its key for the
// policy's deadline on this process's clock (rescue.Action.Deadline):
// rebound-bench scale reads them to time the deletes from rebound's own
// deadline.
const (
	LogMessageRescueAction = "rescue action"
	LogKeyDeadline         = "deadline"
)

// record records an action the shared executor (pkg/rescue/execute, the
// same one `rebound restore bringup` uses) applied with outcome o: its log
// line, and on success the ledger and the policy's records. It returns
// the write of the action's Event, which the pass makes beside the
// policies' status writes (Reconcile).
func (r *RecoveryReconciler) record(ctx context.Context, log logr.Logger, a rescue.Action, o execute.Outcome, owners map[string]rescue.Workload, records map[string][]v1alpha1.ActionRecord) (func(), error) {
	rescuesTotal.WithLabelValues(string(a.Kind), o.Result).Inc()
	w := owners[a.Namespace+"/"+a.Pod]
	event := func() {
		if err := r.exec.RecordOutcome(ctx, a, w, o); err != nil {
			log.Error(err, "Event not recorded", "action", a.Kind, "object", a.Namespace+"/"+a.Name)
		}
	}
	if o.Err != nil {
		log.Error(o.Err, "action failed", "action", a.Kind, "object", a.Namespace+"/"+a.Name, "reason", a.Reason)
		return event, fmt.Errorf("%s: %w", a.Key(), o.Err)
	}
	kv := []any{"action", a.Kind, "object", a.Namespace + "/" + a.Name, "pod", a.Pod, "node", a.Node,
		"result", o.Result, "detail", o.Detail, "reason", a.Reason}
	if !a.Deadline.IsZero() {
		kv = append(kv, LogKeyDeadline, a.Deadline.Format(time.RFC3339Nano))
	}
	log.Info(LogMessageRescueAction, kv...)
	if o.Applied() && a.Policy != "" {
		rec := a.Record(r.clock.Now(), rescue.ResultSucceeded)
		records[a.Policy] = append(records[a.Policy], rec)
		r.remember(a.Policy, rec)
	}
	return event, nil
}

// remember adds a real action to the in-memory ledger of the last minute
// (rescue.Snapshot.RecentActions): the status write may take a while to
// come back through the cache, and until it does the next plan must still
// count the action against maxActionsPerMinute.
func (r *RecoveryReconciler) remember(policy string, rec v1alpha1.ActionRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ledger = append(r.ledger, rescue.LedgerEntry{Policy: policy, Record: rec})
}

// recentActions prunes the ledger to the last minute and returns a copy,
// with when the ledger began: this process's first pass. Passes run only
// while this process leads, and a replica that loses the lease exits, so
// from then on the ledger sees every action taken.
func (r *RecoveryReconciler) recentActions(now time.Time) ([]rescue.LedgerEntry, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ledgerSince.IsZero() {
		r.ledgerSince = now
	}
	kept := r.ledger[:0]
	for _, e := range r.ledger {
		if now.Sub(e.Record.Time.Time) < time.Minute {
			kept = append(kept, e)
		}
	}
	r.ledger = kept
	return append([]rescue.LedgerEntry(nil), kept...), r.ledgerSince
}

// reportBlocked records one Warning Event for each pod that enters
// NoTarget or Held (and again if its decision changes and comes back), so
// that `kubectl get events` says why nothing happens without an Event
// every pass.
func (r *RecoveryReconciler) reportBlocked(ctx context.Context, log logr.Logger, plan rescue.Plan) {
	now := map[string]rescue.Decision{}
	for i := range plan.Critical {
		cp := &plan.Critical[i]
		if cp.Decision != rescue.DecisionNoTarget && cp.Decision != rescue.DecisionHeld {
			continue
		}
		key := string(cp.UID)
		now[key] = cp.Decision
		r.mu.Lock()
		seen := r.blocked[key] == cp.Decision
		r.mu.Unlock()
		if seen {
			continue
		}
		reason := execute.ReasonNoTarget
		if cp.Decision == rescue.DecisionHeld {
			reason = execute.ReasonHeld
		}
		log.Info("rescue held", "decision", cp.Decision, "pod", cp.Key(), "node", cp.Node, "reason", cp.Reason)
		a := rescue.Action{Namespace: cp.Namespace, Name: cp.Name, UID: cp.UID, Pod: cp.Name, Node: cp.Node}
		if err := r.exec.Event(ctx, a, cp.Workload, corev1.EventTypeWarning, reason, fmt.Sprintf("%s: %s", cp.Key(), cp.Reason)); err != nil {
			log.Error(err, "Event not recorded", "pod", cp.Key())
		}
	}
	r.mu.Lock()
	r.blocked = now
	r.mu.Unlock()
}

// statusMinInterval is how long after this process wrote a policy's
// status a change without new action records waits to be written. During
// a rescue every pass changes the counts (stranded pods go as they are
// deleted); writing each would hold every pass, and the next deadline,
// behind a round of status writes. Records are written at once: after a
// restart they are what counts against maxActionsPerMinute.
const statusMinInterval = time.Second

// updateStatuses writes each policy's counts, conditions and the actions
// just taken (rescue.PrependRecords: newest first, at most 10). A policy
// whose status would not change is not written; one whose only change is
// its counts or conditions, written less than statusMinInterval ago, is
// written by a pass at most statusMinInterval later (statusPending).
func (r *RecoveryReconciler) updateStatuses(ctx context.Context, log logr.Logger, policies []*v1alpha1.RecoveryPolicy, plan rescue.Plan, records map[string][]v1alpha1.ActionRecord) error {
	reports := map[string]rescue.PolicyReport{}
	for _, pr := range plan.Policies {
		reports[pr.Name] = pr
	}
	// Each policy's status is its own object: written in parallel, so
	// that a rescue spread over many policies does not hold the next pass
	// (and the next deadline) behind one round trip after another.
	errs := make([]error, len(policies))
	inParallelUpTo(len(policies), statusParallelism, func(i int) {
		rep, ok := reports[policies[i].Name]
		if !ok {
			return
		}
		if err := r.writeStatus(ctx, policies[i], rep, records[policies[i].Name]); err != nil {
			errs[i] = fmt.Errorf("update status of RecoveryPolicy %s: %w", policies[i].Name, err)
			log.Error(err, "status update failed", "policy", policies[i].Name)
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// statusConflictRetries bounds the re-reads after a conflicting status
// write.
const statusConflictRetries = 3

// writeStatus patches p's status with the pass's report and records. The
// patch carries p's resourceVersion: status.lastActions is a list, which
// a merge patch replaces whole, so a patch computed from a cached policy
// that has not seen the previous pass's write yet would drop that pass's
// records (and its rescuesTotal). On a conflict the policy is read again
// from the API and the records are put on top of what is there.
// statusWrite is the last status patch this process made of a policy:
// when, the resourceVersion it patched over, and the policy as the API
// returned it (nil once the cache has caught up with it).
type statusWrite struct {
	at     time.Time
	over   string
	policy *v1alpha1.RecoveryPolicy
}

// latest is the newest of a cached policy and this process's last write
// of it. The cache sees a write a moment after the API has it; until it
// does it still holds the version the write patched over, and a patch
// from it would conflict, cost a re-read, and hold the next pass (and
// the next deadline) behind both. Any other version in the cache is
// someone else's change or the write itself, and the cache wins.
func (r *RecoveryReconciler) latest(p *v1alpha1.RecoveryPolicy) *v1alpha1.RecoveryPolicy {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.written[p.Name]
	switch {
	case !ok || w.policy == nil:
		return p
	case w.over == p.ResourceVersion && w.policy.UID == p.UID:
		return w.policy.DeepCopy()
	default:
		w.policy = nil
		r.written[p.Name] = w
		return p
	}
}

// wrote remembers a status patch of p over resourceVersion over.
func (r *RecoveryReconciler) wrote(over string, p *v1alpha1.RecoveryPolicy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.written == nil {
		r.written = map[string]statusWrite{}
	}
	r.written[p.Name] = statusWrite{at: r.clock.Now(), over: over, policy: p.DeepCopy()}
}

// wroteRecently reports whether this process wrote the status of policy
// less than statusMinInterval ago; if so, a pass must come back to write
// what it does not write now (statusPending).
func (r *RecoveryReconciler) wroteRecently(policy string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.written[policy]
	if !ok || r.clock.Since(w.at) >= statusMinInterval {
		return false
	}
	r.statusPending = true
	return true
}

// takeStatusPending reports, and forgets, whether a pass left a status
// change unwritten.
func (r *RecoveryReconciler) takeStatusPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.statusPending
	r.statusPending = false
	return p
}

func (r *RecoveryReconciler) writeStatus(ctx context.Context, p *v1alpha1.RecoveryPolicy, rep rescue.PolicyReport, recs []v1alpha1.ActionRecord) error {
	p = r.latest(p)
	for attempt := 0; ; attempt++ {
		next := p.Status.DeepCopy()
		next.ObservedGeneration = p.Generation
		next.StrandedPods = int32(rep.Stranded)
		next.WaitingForFencing = int32(rep.WaitingForFencing)
		if len(recs) > 0 {
			next.RescuesTotal += int64(len(recs))
			next.LastActions = rescue.PrependRecords(next.LastActions, recs...)
		}
		meta.SetStatusCondition(&next.Conditions, readyCondition(p, rep))
		meta.SetStatusCondition(&next.Conditions, degradedCondition(p, rep))
		if equality.Semantic.DeepEqual(&p.Status, next) {
			return nil
		}
		if len(recs) == 0 && next.ObservedGeneration == p.Status.ObservedGeneration && r.wroteRecently(p.Name) {
			return nil
		}
		orig := p.DeepCopy()
		p.Status = *next
		// API call: patch recoverypolicies/status (deploy/rbac/controller_role.yaml; rbac_test.go checks it).
		err := r.client.Status().Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			// p is now what the API returned: the new resourceVersion.
			r.wrote(orig.ResourceVersion, p)
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt == statusConflictRetries:
			return err
		}
		fresh, err := r.policyFromAPI(ctx, p.Name)
		if err != nil || fresh == nil {
			return err
		}
		p = fresh
	}
}

// policyFromAPI reads one policy from the API, not the cache; nil when it
// is gone. A list by name needs no verb beyond the list the cache uses.
func (r *RecoveryReconciler) policyFromAPI(ctx context.Context, name string) (*v1alpha1.RecoveryPolicy, error) {
	var list v1alpha1.RecoveryPolicyList
	// API call: list recoverypolicies (deploy/rbac/controller_role.yaml; rbac_test.go checks it).
	if err := r.reader.List(ctx, &list, client.MatchingFields{"metadata.name": name}); err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// conditionMessageMax is the API's maxLength for a condition's message.
const conditionMessageMax = 32768

func readyCondition(p *v1alpha1.RecoveryPolicy, rep rescue.PolicyReport) metav1.Condition {
	c := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Valid", Message: "policy is valid and applied", ObservedGeneration: p.Generation}
	if !rep.Valid {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Invalid", rescue.Truncate(rep.Error, 1000)
	}
	return c
}

// degradedCondition says whether stranded pods are blocked, and why: Held
// (full disruption, or a fenced node that appears alive), NoTarget (no
// Ready node admits the replacement), or Blocked (fencing, rate limits).
func degradedCondition(p *v1alpha1.RecoveryPolicy, rep rescue.PolicyReport) metav1.Condition {
	c := metav1.Condition{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "NothingBlocked", Message: "no stranded pod is blocked", ObservedGeneration: p.Generation}
	counts := fmt.Sprintf("%d stranded pods are held, %d have no target node, %d wait for fencing, %d are rate-limited",
		rep.Held, rep.NoTarget, rep.WaitingForFencing, rep.RateLimited)
	switch {
	case rep.Held > 0:
		c.Reason = string(rescue.DecisionHeld)
	case rep.NoTarget > 0:
		c.Reason = string(rescue.DecisionNoTarget)
	case rep.WaitingForFencing > 0 || rep.RateLimited > 0:
		c.Reason = "Blocked"
	default:
		return c
	}
	c.Status = metav1.ConditionTrue
	c.Message = counts
	if rep.Blocked != "" {
		c.Message += "; first: " + rep.Blocked
	}
	c.Message = rescue.Truncate(c.Message, conditionMessageMax)
	return c
}
