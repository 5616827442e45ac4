package scenario

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readyPod(name, node string, at time.Time, deleting bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: at}
	}
	return p
}

func TestMeasurePods(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Recovery{Node: "node-3", NotReadySince: t0}
	r.measurePods([]corev1.Pod{
		readyPod("old", "node-3", t0.Add(-time.Hour), false),      // the stranded pod
		readyPod("before", "node-1", t0.Add(-time.Minute), false), // Ready before the outage: not a replacement
		readyPod("going", "node-0", t0.Add(10*time.Second), true), // terminating
		readyPod("late", "node-0", t0.Add(40*time.Second), false), // a later one
		readyPod("replacement", "node-0", t0.Add(31*time.Second), false),
	})
	if !r.Recovered || r.Pod != "replacement" || r.Seconds != 31 {
		t.Errorf("measurePods = %+v, want replacement after 31s", r)
	}
	none := Recovery{Node: "node-3", NotReadySince: t0}
	none.measurePods([]corev1.Pod{readyPod("old", "node-3", t0.Add(-time.Hour), false)})
	if none.Recovered {
		t.Errorf("a pod on the dead node counted as a replacement: %+v", none)
	}
}

func TestComparisonLines(t *testing.T) {
	lines := func(c Comparison) []string {
		t.Helper()
		got, err := c.Lines()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := lines(Comparison{ID: "s3", Without: Recovery{Recovered: true, Seconds: 330}, With: Recovery{Recovered: true, Seconds: 33, AvailableSeconds: 33.5}})
	want := []string{"METRIC s3_recovery_without_rebound=330.0 s", "METRIC s3_recovery_with_rebound=33.0 s", "METRIC s3_available_with_rebound=33.5 s", "METRIC s3_speedup=10.0 x"}
	if !slices.Equal(got, want) {
		t.Errorf("both recovered:\n got %q\nwant %q", got, want)
	}
	got = lines(Comparison{ID: "s1", Without: Recovery{UnavailableAtLeast: 95}, With: Recovery{Recovered: true, Seconds: 31.6}, Observe: 90 * time.Second})
	want = []string{"METRIC s1_without_rebound_recovered=0 count", "METRIC s1_without_rebound_unavailable_at_least=95.0 s", "METRIC s1_recovery_with_rebound=31.6 s", "METRIC s1_speedup_at_least=3.0 x", "CONFIG s1_without_rebound_observe=90 s"}
	if !slices.Equal(got, want) {
		t.Errorf("baseline never recovered:\n got %q\nwant %q", got, want)
	}
	for _, l := range got {
		if l == "METRIC s1_recovery_without_rebound=-1.0 s" {
			t.Error("a -1 recovery time")
		}
	}
	if _, err := (Comparison{ID: "s 1", With: Recovery{Recovered: true, Seconds: 1}}).Lines(); err == nil {
		t.Error("an id with a space made lines")
	}
}

func TestS13PairLines(t *testing.T) {
	p := S13Pair{
		Without: S13Result{Verdict: 40 * time.Second, EndpointsOff: 41 * time.Second, ReplacementReady: 100 * time.Second},
		With:    S13Result{Verdict: 4 * time.Second, EndpointsOff: 5 * time.Second, ReplacementReady: 10 * time.Second},
	}
	got, err := p.Lines()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"METRIC s13_death_to_verdict_without_rebound=40.0 s", "METRIC s13_death_to_verdict=4.0 s",
		"METRIC s13_death_to_endpoints_off_without_rebound=41.0 s", "METRIC s13_death_to_endpoints_off=5.0 s",
		"METRIC s13_death_to_replacement_ready_without_rebound=100.0 s", "METRIC s13_death_to_replacement_ready=10.0 s",
		"METRIC s13_speedup=10.0 x", "METRIC s13_endpoints_speedup=8.2 x",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
