package controller

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sharedParts hands out one instance of each distinct label map, owner
// list, toleration list, requests container and common string that cached
// pods carry. The replicas of a ReplicaSet carry equal labels, owners,
// tolerations and requests, every pod of a DaemonSet too, and nearly every
// pod carries the same two default tolerations: decoded separately, these
// copies are about a third of a trimmed pod (BenchmarkTrimPodRetained).
//
// Sharing is safe because cached objects are never written: the planner
// reads them in place (PlanFor does not mutate its Snapshot), and a client
// Get or List without UnsafeDisableDeepCopy copies them.
//
// The table is bounded: once it holds maxSharedParts entries it starts
// afresh. Instances already handed out stay valid; they are only no longer
// shared with the pods that come after. A cluster's churn (new
// ReplicaSets on every rollout) therefore never grows it without bound.
type sharedParts struct {
	mu      sync.Mutex
	entries map[string]any
	key     strings.Builder
}

const maxSharedParts = 8192

func newSharedParts() *sharedParts {
	return &sharedParts{entries: map[string]any{}}
}

// intern returns the instance stored under key, or stores and returns v.
// It must be called with s.mu held.
func intern[T any](s *sharedParts, key string, v T) T {
	if got, ok := s.entries[key]; ok {
		if t, ok := got.(T); ok {
			return t
		}
	}
	if len(s.entries) >= maxSharedParts {
		clear(s.entries)
	}
	s.entries[key] = v
	return v
}

// share replaces the pod's shareable parts with their shared instances.
// The pod must come from trimPod: its one container, if any, carries only
// a name and requests (requestsOnly), which is all the key spells.
func (s *sharedParts) share(pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pod.Namespace = s.str(pod.Namespace)
	pod.Spec.NodeName = s.str(pod.Spec.NodeName)
	pod.Spec.PriorityClassName = s.str(pod.Spec.PriorityClassName)
	pod.Status.Phase = corev1.PodPhase(s.str(string(pod.Status.Phase)))
	if len(pod.Labels) > 0 {
		pod.Labels = intern(s, s.labelsKey("l", pod.Labels), pod.Labels)
	}
	if len(pod.Spec.NodeSelector) > 0 {
		pod.Spec.NodeSelector = intern(s, s.labelsKey("n", pod.Spec.NodeSelector), pod.Spec.NodeSelector)
	}
	if len(pod.OwnerReferences) > 0 {
		pod.OwnerReferences = intern(s, s.ownersKey(pod.OwnerReferences), pod.OwnerReferences)
	}
	if len(pod.Spec.Tolerations) > 0 {
		pod.Spec.Tolerations = intern(s, s.tolerationsKey(pod.Spec.Tolerations), pod.Spec.Tolerations)
	}
	if len(pod.Spec.Containers) > 0 {
		pod.Spec.Containers = intern(s, s.requestsKey(pod.Spec.Containers), pod.Spec.Containers)
	}
}

func (s *sharedParts) str(v string) string {
	if v == "" {
		return v
	}
	return intern(s, "s\x00"+v, v)
}

// The keys spell every field of the part, each followed by a NUL (which no
// Kubernetes name or value contains), after a prefix naming the part.

func (s *sharedParts) labelsKey(prefix string, m map[string]string) string {
	s.begin(prefix)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s.field(k)
		s.field(m[k])
	}
	return s.key.String()
}

func (s *sharedParts) ownersKey(refs []metav1.OwnerReference) string {
	s.begin("o")
	for i := range refs {
		r := &refs[i]
		s.field(r.APIVersion)
		s.field(r.Kind)
		s.field(r.Name)
		s.field(string(r.UID))
		s.field(boolPtr(r.Controller))
		s.field(boolPtr(r.BlockOwnerDeletion))
	}
	return s.key.String()
}

func (s *sharedParts) tolerationsKey(ts []corev1.Toleration) string {
	s.begin("t")
	for i := range ts {
		t := &ts[i]
		s.field(t.Key)
		s.field(string(t.Operator))
		s.field(t.Value)
		s.field(string(t.Effect))
		if t.TolerationSeconds == nil {
			s.field("-")
		} else {
			s.field(strconv.FormatInt(*t.TolerationSeconds, 10))
		}
	}
	return s.key.String()
}

// requestsKey spells the container trimPod keeps (requestsOnly): its
// name, requests and host ports, the only fields it sets.
func (s *sharedParts) requestsKey(cs []corev1.Container) string {
	s.begin("c")
	for i := range cs {
		c := &cs[i]
		s.field(c.Name)
		for _, n := range slices.Sorted(maps.Keys(c.Resources.Requests)) {
			q := c.Resources.Requests[n]
			s.field(string(n))
			s.field(q.String())
		}
		for _, p := range c.Ports {
			s.field("port")
			s.field(p.Name)
			s.field(p.HostIP)
			s.field(string(p.Protocol))
			s.field(strconv.Itoa(int(p.HostPort)))
			s.field(strconv.Itoa(int(p.ContainerPort)))
		}
	}
	return s.key.String()
}

// begin starts a key with the part's prefix.
func (s *sharedParts) begin(prefix string) {
	s.key.Reset()
	s.field(prefix)
}

func (s *sharedParts) field(v string) {
	s.key.WriteString(v)
	s.key.WriteByte(0)
}

func boolPtr(b *bool) string {
	switch {
	case b == nil:
		return "-"
	case *b:
		return "1"
	}
	return "0"
}
