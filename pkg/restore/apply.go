package restore

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"rebound/pkg/rescue"
)

// The executor of pkg/rescue's actions. Each action carries preconditions
// (the pod's UID; the Deployment's UID and resourceVersion) so that it never
// hits a newer object of the same name or overrides a change made since the
// plan: a failed precondition means "re-plan", not "error". Applying the
// same plan twice changes nothing the second time.
//
// TODO(dedupe): the controller executes the same actions; move this to
// pkg/rescue/apply.go once both use it.

// ApplyResult is the outcome of one action.
type ApplyResult struct {
	// Applied is true when the action changed the cluster now.
	Applied bool
	// Outcome says what happened, for people.
	Outcome string
	// Err is set when the API refused for another reason than a
	// precondition.
	Err error
}

// Apply executes one action.
func Apply(ctx context.Context, client kubernetes.Interface, a rescue.Action) ApplyResult {
	switch a.Kind {
	case rescue.ActionDelete:
		return deletePod(ctx, client, a, nil)
	case rescue.ActionForceDelete:
		return deletePod(ctx, client, a, ptr.To[int64](0))
	case rescue.ActionScaleDown, rescue.ActionScaleRestore:
		return scale(ctx, client, a)
	}
	return ApplyResult{Outcome: "unknown action kind", Err: fmt.Errorf("unknown action kind %q", a.Kind)}
}

func deletePod(ctx context.Context, client kubernetes.Interface, a rescue.Action, grace *int64) ApplyResult {
	opts := metav1.DeleteOptions{GracePeriodSeconds: grace}
	if a.UID != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &a.UID}
	}
	err := client.CoreV1().Pods(a.Namespace).Delete(ctx, a.Name, opts)
	switch {
	case err == nil:
		if grace != nil {
			return ApplyResult{Applied: true, Outcome: "force-deleted (grace period 0)"}
		}
		return ApplyResult{Applied: true, Outcome: "deleted; its ReplicaSet creates a replacement"}
	case apierrors.IsNotFound(err):
		return ApplyResult{Outcome: "already gone"}
	case apierrors.IsConflict(err):
		return ApplyResult{Outcome: "not deleted: a newer pod of that name exists (UID precondition); re-planned"}
	default:
		return ApplyResult{Outcome: "failed", Err: fmt.Errorf("delete pod %s/%s: %w", a.Namespace, a.Name, err)}
	}
}

// scale is either half of a scale bounce. Both halves change the
// annotation and spec.replicas in one update, which is what makes a bounce
// interrupted between them finish on the next plan.
func scale(ctx context.Context, client kubernetes.Interface, a rescue.Action) ApplyResult {
	deployments := client.AppsV1().Deployments(a.Namespace)
	d, err := deployments.Get(ctx, a.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ApplyResult{Outcome: "Deployment gone"}
	case err != nil:
		return ApplyResult{Outcome: "failed", Err: fmt.Errorf("get Deployment %s/%s: %w", a.Namespace, a.Name, err)}
	case a.UID != "" && d.UID != a.UID:
		return ApplyResult{Outcome: "not scaled: the Deployment was recreated since the plan; re-planned"}
	case a.ResourceVersion != "" && d.ResourceVersion != a.ResourceVersion:
		return ApplyResult{Outcome: "not scaled: the Deployment changed since the plan; re-planned"}
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	var outcome string
	if a.Kind == rescue.ActionScaleDown {
		d.Annotations[rescue.ScaleBounceAnnotation] = strconv.Itoa(int(a.Replicas))
		d.Spec.Replicas = ptr.To[int32](0)
		outcome = fmt.Sprintf("scaled to 0 (annotation %s=%d)", rescue.ScaleBounceAnnotation, a.Replicas)
	} else {
		if _, ok := d.Annotations[rescue.ScaleBounceAnnotation]; !ok || replicas(d.Spec.Replicas) != 0 {
			return ApplyResult{Outcome: "already restored"}
		}
		delete(d.Annotations, rescue.ScaleBounceAnnotation)
		d.Spec.Replicas = ptr.To(a.Replicas)
		outcome = fmt.Sprintf("scaled back to %d", a.Replicas)
	}
	_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
	switch {
	case err == nil:
		return ApplyResult{Applied: true, Outcome: outcome}
	case apierrors.IsConflict(err):
		return ApplyResult{Outcome: "not scaled: the Deployment changed meanwhile; re-planned"}
	default:
		return ApplyResult{Outcome: "failed", Err: fmt.Errorf("update Deployment %s/%s: %w", a.Namespace, a.Name, err)}
	}
}
