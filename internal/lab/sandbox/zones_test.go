package sandbox

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeZones(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want map[string]int
	}{
		{"one zone", Options{Nodes: 4, Zone: "zone-a"}, map[string]int{"zone-a": 4}},
		{"even split, rest first", Options{Nodes: 10, Zones: 3, Zone: "zone-a"}, map[string]int{"zone-a": 4, "zone-b": 3, "zone-c": 3}},
		{"explicit sizes", Options{Nodes: 10, ZoneSizes: []int{7, 2, 1}, Zone: "zone-a"}, map[string]int{"zone-a": 7, "zone-b": 2, "zone-c": 1}},
	} {
		got := map[string]int{}
		zones := tc.o.nodeZones()
		for _, z := range zones {
			got[z]++
		}
		if len(zones) != tc.o.Nodes || !maps.Equal(got, tc.want) {
			t.Errorf("%s: zones %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestValidateZonesNamesTheProblem(t *testing.T) {
	for _, o := range []Options{
		{Nodes: 10, ZoneSizes: []int{5, 4}},
		{Nodes: 10, ZoneSizes: []int{10, 0}},
		{Nodes: 10, Zones: 3, ZoneSizes: []int{5, 5}},
		{Nodes: 10, Zones: 27},
	} {
		if err := o.validateZones(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
	if err := (&Options{Nodes: 10, ZoneSizes: []int{5, 5}}).validateZones(); err != nil {
		t.Errorf("valid sizes rejected: %v", err)
	}
}

func TestNodeAddressesAreDistinct(t *testing.T) {
	if NodeAddress(0) != "127.0.1.1" {
		t.Errorf("node-0 is %s, want 127.0.1.1 as before", NodeAddress(0))
	}
	seen := map[string]bool{}
	for i := range MaxNodes {
		a := NodeAddress(i)
		if seen[a] {
			t.Fatalf("node-%d has %s, already taken", i, a)
		}
		seen[a] = true
	}
}

func TestParallelRunsEveryIndexOnceAndStopsOnError(t *testing.T) {
	var hits [100]atomic.Int32
	if err := Parallel(context.Background(), 100, 7, func(_ context.Context, i int) error { hits[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range hits {
		if hits[i].Load() != 1 {
			t.Fatalf("index %d ran %d times", i, hits[i].Load())
		}
	}
	boom := errors.New("boom")
	var ran atomic.Int32
	err := Parallel(context.Background(), 1000, 4, func(_ context.Context, i int) error {
		ran.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || ran.Load() == 1000 {
		t.Errorf("err %v after %d runs, want boom and an early stop", err, ran.Load())
	}
}

// TestConditionTainted: a node counts as started only once the taints for
// its Ready condition are off (the apiserver puts not-ready on a new node;
// kube-controller-manager takes it off a moment after Ready), and no
// other taint holds it back.
func TestConditionTainted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		want   bool
	}{
		{"none", nil, false},
		{"not-ready NoSchedule from admission", []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}, true},
		{"unreachable NoExecute", []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}, true},
		{"the control-plane taint", []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conditionTainted(&corev1.Node{Spec: corev1.NodeSpec{Taints: tc.taints}}); got != tc.want {
				t.Errorf("conditionTainted = %v, want %v", got, tc.want)
			}
		})
	}
}
