package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

// Results of an action, as metrics and status record them.
const (
	resultSucceeded = "succeeded"
	// resultAlreadyDone: the object was gone or had changed (UID or
	// resourceVersion precondition failed): someone, maybe an earlier run
	// of rebound, got there first. Not an error, and not repeated.
	resultAlreadyDone = "already_done"
	resultFailed      = "failed"
)

// apply carries out one action. Every write has a precondition (the pod's
// UID, the Deployment's resourceVersion), so applying a stale plan can
// never hit a newer object.
func (r *RecoveryReconciler) apply(ctx context.Context, a rescue.Action) (string, error) {
	var err error
	switch a.Kind {
	case rescue.ActionDelete, rescue.ActionForceDelete:
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Name}}
		opts := []client.DeleteOption{client.Preconditions{UID: &a.UID}}
		if a.Kind == rescue.ActionForceDelete {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		err = r.client.Delete(ctx, pod, opts...)
	case rescue.ActionScaleDown:
		err = r.patchDeployment(ctx, a, map[string]any{
			"metadata": map[string]any{
				"resourceVersion": a.ResourceVersion,
				"annotations":     map[string]any{rescue.ScaleBounceAnnotation: strconv.Itoa(int(a.Replicas))},
			},
			"spec": map[string]any{"replicas": 0},
		})
	case rescue.ActionScaleRestore:
		err = r.patchDeployment(ctx, a, map[string]any{
			"metadata": map[string]any{
				"resourceVersion": a.ResourceVersion,
				"annotations":     map[string]any{rescue.ScaleBounceAnnotation: nil},
			},
			"spec": map[string]any{"replicas": a.Replicas},
		})
	default:
		return resultFailed, fmt.Errorf("unknown action kind %q", a.Kind)
	}
	switch {
	case err == nil:
		return resultSucceeded, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return resultAlreadyDone, nil
	default:
		return resultFailed, err
	}
}

// patchDeployment sends a JSON merge patch that carries the plan's
// resourceVersion: the apiserver rejects it with a conflict if the
// Deployment changed since the plan read it. Annotation and replicas change
// in the same write, which is what makes a scale bounce crash-safe.
func (r *RecoveryReconciler) patchDeployment(ctx context.Context, a rescue.Action, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Name, UID: a.UID}}
	return r.client.Patch(ctx, d, client.RawPatch(types.MergePatchType, data))
}

// event records a Kubernetes Event on the object whose fate the action
// decides (the Deployment or StatefulSet), falling back to the pod.
func (r *RecoveryReconciler) event(ctx context.Context, a rescue.Action, owners map[string]rescue.Workload, eventType, reason, note string) {
	if len(note) > 1000 {
		note = note[:997] + "..."
	}
	var regarding, related runtime.Object
	pod := &corev1.Pod{}
	if a.Pod != "" && r.client.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Pod}, pod) == nil {
		related = pod
	}
	switch {
	case a.Kind == rescue.ActionScaleDown || a.Kind == rescue.ActionScaleRestore:
		d := &appsv1.Deployment{}
		if r.client.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Name}, d) == nil {
			regarding = d
		}
	default:
		w := owners[a.Namespace+"/"+a.Name]
		var obj client.Object
		switch w.Kind {
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "ReplicaSet":
			obj = &appsv1.ReplicaSet{}
		}
		if obj != nil && r.client.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: w.Name}, obj) == nil {
			regarding = obj
		}
	}
	if regarding == nil {
		if related == nil {
			return // the object is gone; the log line remains
		}
		regarding, related = related, nil
	}
	r.recorder.Eventf(regarding, related, eventType, reason, string(a.Kind), "%s", note)
}

// updateStatuses writes each policy's counts, conditions and the actions
// just taken (newest first, at most 10). A policy whose status would not
// change is not written.
func (r *RecoveryReconciler) updateStatuses(ctx context.Context, policies []*v1alpha1.RecoveryPolicy, plan rescue.Plan, records map[string][]v1alpha1.ActionRecord) error {
	reports := map[string]rescue.PolicyReport{}
	for _, pr := range plan.Policies {
		reports[pr.Name] = pr
	}
	var errs []error
	for _, p := range policies {
		rep, ok := reports[p.Name]
		if !ok {
			continue
		}
		next := p.Status.DeepCopy()
		next.ObservedGeneration = p.Generation
		next.StrandedPods = int32(rep.Stranded)
		next.WaitingForFencing = int32(rep.WaitingForFencing)
		if recs := records[p.Name]; len(recs) > 0 {
			next.RescuesTotal += int64(len(recs))
			// newest first
			merged := make([]v1alpha1.ActionRecord, 0, len(recs)+len(next.LastActions))
			for i := len(recs) - 1; i >= 0; i-- {
				merged = append(merged, recs[i])
			}
			merged = append(merged, next.LastActions...)
			if len(merged) > 10 {
				merged = merged[:10]
			}
			next.LastActions = merged
		}
		ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Valid", Message: "policy is valid and applied", ObservedGeneration: p.Generation}
		if !rep.Valid {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "Invalid", truncate(rep.Error, 1000)
		}
		degraded := metav1.Condition{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "NothingBlocked", Message: "no stranded pod is blocked", ObservedGeneration: p.Generation}
		if rep.WaitingForFencing > 0 || rep.RateLimited > 0 {
			degraded.Status, degraded.Reason = metav1.ConditionTrue, "Blocked"
			degraded.Message = fmt.Sprintf("%d stranded pods wait for fencing, %d are rate-limited", rep.WaitingForFencing, rep.RateLimited)
		}
		meta.SetStatusCondition(&next.Conditions, ready)
		meta.SetStatusCondition(&next.Conditions, degraded)
		if equality.Semantic.DeepEqual(&p.Status, next) {
			continue
		}
		orig := p.DeepCopy()
		p.Status = *next
		if err := r.client.Status().Patch(ctx, p, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("update status of RecoveryPolicy %s: %w", p.Name, err))
			ctrl.LoggerFrom(ctx).Error(err, "status update failed", "policy", p.Name)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
