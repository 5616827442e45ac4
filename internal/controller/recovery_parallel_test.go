package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/pkg/rescue"
)

// TestApplyAllAppliesEveryActionNotHeld deletes 40 pods concurrently and
// checks each outcome lands at its action's index; a dry-run action and,
// with the stop switch, every action are left alone.
func TestApplyAllAppliesEveryActionNotHeld(t *testing.T) {
	var objs []client.Object
	var actions []rescue.Action
	for i := range 40 {
		uid := types.UID(fmt.Sprint("uid-", i))
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("p", i), UID: uid}})
		actions = append(actions, rescue.Action{Kind: rescue.ActionDelete, Namespace: "ns", Name: fmt.Sprint("p", i), UID: uid, DryRun: i == 7})
	}
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).Build()
	r := &RecoveryReconciler{client: cl}

	if done := r.applyAll(context.Background(), actions, true); done[0] != (applied{}) {
		t.Fatalf("with the stop switch pulled an action was applied: %+v", done[0])
	}
	done := r.applyAll(context.Background(), actions, false)
	for i, a := range actions {
		err := cl.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: a.Name}, &corev1.Pod{})
		switch {
		case i == 7:
			if err != nil || done[i] != (applied{}) {
				t.Errorf("dry-run action %d applied: %+v, get: %v", i, done[i], err)
			}
		case done[i].result != resultSucceeded || !apierrors.IsNotFound(err):
			t.Errorf("action %d: %+v, pod still there: %v", i, done[i], err)
		}
	}
}
