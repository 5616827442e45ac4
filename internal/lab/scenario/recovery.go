package scenario

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/lab/report"
	"rebound/pkg/kubestatus"
)

// Recovery is a time to recovery read from the API's own timestamps, not
// from a poller's observation: the clock starts at the lastTransitionTime
// of the dead node's Ready condition (what the node lifecycle controller,
// upstream's tolerations and rebound's maxUnavailableTime all count from)
// and stops at the lastTransitionTime of the replacement pod's Ready
// condition; the Deployment's Available condition is read too.
type Recovery struct {
	// Node is the dead node whose Ready condition starts the clock.
	Node string `json:"node"`
	// NotReadySince is that condition's lastTransitionTime.
	NotReadySince time.Time `json:"notReadySince"`
	// Recovered is true when a replacement pod is Ready on another node.
	Recovered bool `json:"recovered"`
	// Pod and PodNode name the replacement; PodReadySince is its Ready
	// condition's lastTransitionTime.
	Pod           string    `json:"pod,omitempty"`
	PodNode       string    `json:"podNode,omitempty"`
	PodReadySince time.Time `json:"podReadySince,omitempty"`
	// AvailableSince is the lastTransitionTime of the Deployment's
	// Available condition when it is True at the end.
	AvailableSince time.Time `json:"availableSince,omitempty"`
	// Seconds is PodReadySince - NotReadySince; AvailableSeconds is
	// AvailableSince - NotReadySince (0 when the condition is older than
	// the outage, i.e. never went False).
	Seconds          float64 `json:"seconds,omitempty"`
	AvailableSeconds float64 `json:"availableSeconds,omitempty"`
	// UnavailableAtLeast, when not Recovered, is how long after
	// NotReadySince the workload was last seen not recovered.
	UnavailableAtLeast float64 `json:"unavailableAtLeastSeconds,omitempty"`
}

// MeasureRecovery reads w's recovery from node's outage: the node's Ready
// condition, w's pods and w's Deployment, as they are now. now is the time
// of the last observation (for UnavailableAtLeast).
func MeasureRecovery(ctx context.Context, client kubernetes.Interface, w Workload, node string, now time.Time) (Recovery, error) {
	r := Recovery{Node: node}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return r, fmt.Errorf("measure recovery: %w", err)
	}
	ready, since := kubestatus.NodeReadySince(n)
	if ready || since.IsZero() {
		return r, fmt.Errorf("measure recovery: node %s is not NotReady (Ready %v since %v)", node, ready, since)
	}
	r.NotReadySince = since
	d, err := client.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return r, fmt.Errorf("measure recovery: %w", err)
	}
	pods, err := client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	if err != nil {
		return r, fmt.Errorf("measure recovery: %w", err)
	}
	r.measurePods(pods.Items)
	if ok, at := kubestatus.DeploymentAvailableSince(d); ok && r.Recovered && at.After(since) {
		r.AvailableSince = at
		r.AvailableSeconds = at.Sub(since).Seconds()
	}
	if !r.Recovered {
		r.UnavailableAtLeast = now.Sub(since).Seconds()
	}
	return r, nil
}

// measurePods takes the earliest Ready replacement: a live pod on another
// node that became Ready after the node went NotReady.
func (r *Recovery) measurePods(pods []corev1.Pod) {
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || p.Spec.NodeName == r.Node {
			continue
		}
		ready, at := kubestatus.PodReadySince(p)
		if !ready || at.Before(r.NotReadySince) {
			continue
		}
		if !r.Recovered || at.Before(r.PodReadySince) {
			r.Recovered, r.Pod, r.PodNode, r.PodReadySince = true, p.Name, p.Spec.NodeName, at
			r.Seconds = at.Sub(r.NotReadySince).Seconds()
		}
	}
}

// Slowest sums up several workloads' recoveries: recovered only when all
// are, then the slowest; otherwise the one unavailable longest. Zero for
// none.
func Slowest(rs []Recovery) Recovery {
	var out Recovery
	for i, r := range rs {
		switch {
		case i == 0:
			out = r
		case out.Recovered && !r.Recovered:
			out = r
		case out.Recovered && r.Recovered && r.Seconds > out.Seconds:
			out = r
		case !out.Recovered && !r.Recovered && r.UnavailableAtLeast > out.UnavailableAtLeast:
			out = r
		}
	}
	return out
}

// Comparison is one scenario played without and with rebound in the same
// run.
type Comparison struct {
	// ID is the scenario's id in lower case (s1, s3): the METRIC prefix.
	ID            string
	Without, With Recovery
	// Observe is how long the lane without rebound was watched: a
	// setting, printed as CONFIG.
	Observe time.Duration
}

// Write writes the comparison's METRIC lines (measured values only) and
// CONFIG lines (settings):
//
//	METRIC <id>_recovery_without_rebound=<s> s   (or <id>_without_rebound_recovered=0 count)
//	METRIC <id>_recovery_with_rebound=<s> s
//	METRIC <id>_speedup=<without/with> x
//
// When the lane without rebound never recovered, the speedup is a lower
// bound from how long it was seen unavailable: <id>_speedup_at_least.
func (c Comparison) Write(w *report.Writer) {
	for _, l := range []struct {
		name string
		r    Recovery
	}{{"without_rebound", c.Without}, {"with_rebound", c.With}} {
		if l.r.Recovered {
			w.Metric(c.ID+"_recovery_"+l.name, l.r.Seconds, "s")
			if l.r.AvailableSeconds > 0 {
				w.Metric(c.ID+"_available_"+l.name, l.r.AvailableSeconds, "s")
			}
		} else {
			w.Count(c.ID+"_"+l.name+"_recovered", 0)
			w.Metric(c.ID+"_"+l.name+"_unavailable_at_least", l.r.UnavailableAtLeast, "s")
		}
	}
	switch {
	case c.Without.Recovered && c.With.Recovered && c.With.Seconds > 0:
		w.Metric(c.ID+"_speedup", c.Without.Seconds/c.With.Seconds, "x")
	case !c.Without.Recovered && c.With.Recovered && c.With.Seconds > 0:
		w.Metric(c.ID+"_speedup_at_least", c.Without.UnavailableAtLeast/c.With.Seconds, "x")
	}
	if !c.Without.Recovered && c.Observe > 0 {
		w.Config(c.ID+"_without_rebound_observe", c.Observe.Seconds(), "s")
	}
}

// Lines are the lines Write writes, as text.
func (c Comparison) Lines() ([]string, error) { return report.Lines(c.Write) }
