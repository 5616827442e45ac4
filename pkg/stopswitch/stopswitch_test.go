package stopswitch

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestRead(t *testing.T) {
	key := types.NamespacedName{Namespace: "rebound-system", Name: DefaultName}
	cm := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name    string
		key     types.NamespacedName
		err     error
		pulled  bool
		wantErr string
	}{
		{"exists: pulled", key, nil, true, ""},
		{"absent: not pulled", key, apierrors.NewNotFound(cm, key.Name), false, ""},
		{"forbidden: an error naming the grant", key, apierrors.NewForbidden(cm, key.Name, errors.New("no")), false, "grant get on configmaps in rebound-system"},
		{"unreachable: an error, never not pulled", key, errors.New("connection refused"), false, "read the stop switch ConfigMap rebound-system/rebound-stop"},
		{"no switch configured", types.NamespacedName{Namespace: "rebound-system"}, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			pulled, err := Read(context.Background(), tc.key, func(_ context.Context, got types.NamespacedName) error {
				called = true
				if got != tc.key {
					t.Errorf("read %s, want %s", got, tc.key)
				}
				return tc.err
			})
			if pulled != tc.pulled || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Read = %v, %v; want %v, %q", pulled, err, tc.pulled, tc.wantErr)
			}
			if called != (tc.key.Name != "") {
				t.Errorf("read called = %v", called)
			}
		})
	}
}
