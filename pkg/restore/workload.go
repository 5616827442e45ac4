// Package restore brings a cluster's essential workloads back after a
// platform restore (seed 000): the control plane comes back from an etcd
// snapshot on the surviving node(s), and pods of essential Deployments
// that sat on nodes still down are never evicted, because the zone is in
// PartialDisruption.
//
// Bringup reschedules them with the rules of pkg/rescue (the same planner
// the controller runs, with maxUnavailableTime 0: a restore is an explicit
// operator action), waits on each workload's status, never on "a pod
// exists", within a deadline that grows with the cluster, and ends with an
// exit code that tells success, timeout and refused-as-unsafe apart.
//
// Backup takes the etcd snapshot (pkg/etcdsnapshot) and writes a small
// metadata file next to it.
package restore

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind is a workload kind Bringup knows how to wait for.
type Kind string

// The workload kinds.
const (
	KindDeployment  Kind = "Deployment"
	KindDaemonSet   Kind = "DaemonSet"
	KindStatefulSet Kind = "StatefulSet"
)

// WorkloadRef names one essential workload.
type WorkloadRef struct {
	Namespace string `json:"namespace"`
	Kind      Kind   `json:"kind"`
	Name      string `json:"name"`
}

// String renders the flag form, namespace/kind/name.
func (w WorkloadRef) String() string {
	return w.Namespace + "/" + strings.ToLower(string(w.Kind)) + "/" + w.Name
}

// Display renders "Deployment kube-system/coredns".
func (w WorkloadRef) Display() string { return string(w.Kind) + " " + w.Namespace + "/" + w.Name }

func (w WorkloadRef) compare(o WorkloadRef) int {
	return strings.Compare(w.Namespace+"\x00"+string(w.Kind)+"\x00"+w.Name, o.Namespace+"\x00"+string(o.Kind)+"\x00"+o.Name)
}

// kindAliases maps what a person may type (kubectl's names and short
// names, any case) to a Kind.
var kindAliases = map[string]Kind{
	"deployment": KindDeployment, "deployments": KindDeployment, "deploy": KindDeployment,
	"daemonset": KindDaemonSet, "daemonsets": KindDaemonSet, "ds": KindDaemonSet,
	"statefulset": KindStatefulSet, "statefulsets": KindStatefulSet, "sts": KindStatefulSet,
}

// ParseWorkloadRef parses namespace/kind/name, e.g.
// kube-system/deployment/coredns. Kinds: deployment (deploy), daemonset
// (ds), statefulset (sts), in any case.
func ParseWorkloadRef(s string) (WorkloadRef, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) != 3 {
		return WorkloadRef{}, fmt.Errorf("workload %q: want namespace/kind/name, e.g. kube-system/deployment/coredns", s)
	}
	kind, ok := kindAliases[strings.ToLower(parts[1])]
	if !ok {
		return WorkloadRef{}, fmt.Errorf("workload %q: kind %q is not one of deployment, daemonset, statefulset", s, parts[1])
	}
	w := WorkloadRef{Namespace: parts[0], Kind: kind, Name: parts[2]}
	if msgs := validation.IsDNS1123Label(w.Namespace); len(msgs) > 0 {
		return WorkloadRef{}, fmt.Errorf("workload %q: namespace %q is not valid: %s", s, w.Namespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(w.Name); len(msgs) > 0 {
		return WorkloadRef{}, fmt.Errorf("workload %q: name %q is not valid: %s", s, w.Name, strings.Join(msgs, "; "))
	}
	return w, nil
}

// ParseWorkloadList parses a workloads file: one namespace/kind/name per
// line; blank lines and text after # are ignored. source names the file in
// errors, which give its line.
func ParseWorkloadList(data []byte, source string) ([]WorkloadRef, error) {
	var out []WorkloadRef
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		w, err := ParseWorkloadRef(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", source, line, err)
		}
		out = append(out, w)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no workload: write one namespace/kind/name per line", source)
	}
	return out, nil
}

// Dedupe sorts refs and drops repeats.
func Dedupe(refs []WorkloadRef) []WorkloadRef {
	out := slices.Clone(refs)
	slices.SortFunc(out, WorkloadRef.compare)
	return slices.CompactFunc(out, func(a, b WorkloadRef) bool { return a == b })
}
