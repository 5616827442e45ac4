package scenario

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rebound/pkg/kubestatus"
)

// How long several nodes were NotReady all at once (S7, S10, S11), read
// from the API's own timestamps as the recovery times are: from the last
// of their NotReady transitions, read while they are all still NotReady,
// to the first of their Ready transitions, read once they are all back.
// A poller's clock would count its own polling and the runner's pauses;
// the Ready condition's lastTransitionTime is what the controllers'
// grace periods count from.

// lastNotReady is the latest Ready-condition transition of the named
// nodes, each of which must be NotReady now: the moment they were all
// NotReady.
func lastNotReady(ctx context.Context, cs kubernetes.Interface, names []string) (time.Time, error) {
	nodes, err := getNodes(ctx, cs, names)
	if err != nil {
		return time.Time{}, err
	}
	_, latest, err := readyTransitions(nodes, false)
	return latest, err
}

// firstReady is the earliest Ready-condition transition of the named
// nodes, each of which must be Ready now: the moment the first of them
// came back.
func firstReady(ctx context.Context, cs kubernetes.Interface, names []string) (time.Time, error) {
	nodes, err := getNodes(ctx, cs, names)
	if err != nil {
		return time.Time{}, err
	}
	earliest, _, err := readyTransitions(nodes, true)
	return earliest, err
}

func getNodes(ctx context.Context, cs kubernetes.Interface, names []string) ([]*corev1.Node, error) {
	var out []*corev1.Node
	for _, name := range names {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// readyTransitions returns the earliest and the latest lastTransitionTime
// of the nodes' Ready conditions, and an error unless every node is Ready
// (wantReady) or every node is not, each with a transition time.
func readyTransitions(nodes []*corev1.Node, wantReady bool) (earliest, latest time.Time, err error) {
	if len(nodes) == 0 {
		return time.Time{}, time.Time{}, fmt.Errorf("no nodes")
	}
	for _, n := range nodes {
		ready, since := kubestatus.NodeReadySince(n)
		if ready != wantReady {
			return time.Time{}, time.Time{}, fmt.Errorf("node %s is Ready=%v since %s, want Ready=%v", n.Name, ready, since.Format(time.RFC3339), wantReady)
		}
		if since.IsZero() {
			return time.Time{}, time.Time{}, fmt.Errorf("node %s has no Ready transition time", n.Name)
		}
		if earliest.IsZero() || since.Before(earliest) {
			earliest = since
		}
		if since.After(latest) {
			latest = since
		}
	}
	return earliest, latest, nil
}
