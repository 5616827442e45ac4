package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rebound/api/v1alpha1"
	"rebound/pkg/policyfile"
)

// Selection says which workloads are essential: a RecoveryPolicy (its
// critical selector picks the workloads whose pod template it matches) or
// a list of workloads. Exactly one is set.
type Selection struct {
	Policy    *v1alpha1.RecoveryPolicy
	Workloads []WorkloadRef
}

// ParsePolicy reads a RecoveryPolicy file as `rebound policy validate`
// does (the apiserver's verdict); any error is bad input.
func ParsePolicy(data []byte, source string) (*v1alpha1.RecoveryPolicy, error) {
	r := policyfile.Check(data)
	if !r.Valid() {
		return nil, BadInputf("%s is not a valid RecoveryPolicy:\n  %s", source, strings.Join(policyfile.Messages(r.Errors), "\n  "))
	}
	if len(r.Warnings) > 0 {
		return nil, BadInputf("%s is a RecoveryPolicy the apiserver accepts but rebound cannot use:\n  %s", source, strings.Join(policyfile.Messages(r.Warnings), "\n  "))
	}
	return r.Policy, nil
}

// Resolve checks the selection against the cluster and returns the
// essential workloads, sorted. Every named workload must exist: a name not
// found is bad input, reported with the names that do exist, before
// anything is changed.
func Resolve(ctx context.Context, client kubernetes.Interface, sel Selection) ([]WorkloadRef, error) {
	switch {
	case sel.Policy != nil && len(sel.Workloads) > 0:
		return nil, BadInputf("give either a policy or a list of workloads, not both")
	case sel.Policy != nil:
		return resolvePolicy(ctx, client, sel.Policy)
	case len(sel.Workloads) > 0:
		return resolveRefs(ctx, client, Dedupe(sel.Workloads))
	default:
		return nil, BadInputf("no essential workload given: use --policy FILE, --workload namespace/kind/name or --workloads-file FILE")
	}
}

func resolveRefs(ctx context.Context, client kubernetes.Interface, refs []WorkloadRef) ([]WorkloadRef, error) {
	var missing []string
	for _, r := range refs {
		_, err := getWorkload(ctx, client, r)
		switch {
		case err == nil:
		case apierrors.IsNotFound(err):
			missing = append(missing, fmt.Sprintf("%s not found%s", r.Display(), existing(ctx, client, r)))
		default:
			return nil, fmt.Errorf("get %s: %w", r.Display(), err)
		}
	}
	if len(missing) > 0 {
		return nil, BadInputf("unknown workload, nothing changed:\n  %s", strings.Join(missing, "\n  "))
	}
	return refs, nil
}

// existing lists a few workloads of the same kind and namespace, to help
// spot a typo.
func existing(ctx context.Context, client kubernetes.Interface, r WorkloadRef) string {
	var names []string
	switch r.Kind {
	case KindDeployment:
		l, err := client.AppsV1().Deployments(r.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		}
	case KindDaemonSet:
		l, err := client.AppsV1().DaemonSets(r.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		}
	case KindStatefulSet:
		l, err := client.AppsV1().StatefulSets(r.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf(" (namespace %s has no %s)", r.Namespace, r.Kind)
	}
	slices.Sort(names)
	const maxShown = 10
	more := ""
	if len(names) > maxShown {
		more = fmt.Sprintf(" and %d more", len(names)-maxShown)
		names = names[:maxShown]
	}
	return fmt.Sprintf(" (%ss in %s: %s%s)", r.Kind, r.Namespace, strings.Join(names, ", "), more)
}

// resolvePolicy finds the Deployments, DaemonSets and StatefulSets whose
// pod template the policy's critical selector matches.
func resolvePolicy(ctx context.Context, client kubernetes.Interface, p *v1alpha1.RecoveryPolicy) ([]WorkloadRef, error) {
	if errs := p.Validate(); len(errs) > 0 {
		return nil, BadInput(fmt.Errorf("policy %s is not valid: %w", p.Name, errs.ToAggregate()))
	}
	sel, err := p.Spec.Critical.Compile()
	if err != nil {
		return nil, BadInput(fmt.Errorf("policy %s: %w", p.Name, err))
	}
	namespaces := p.Spec.Critical.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	nsLabels := map[string]map[string]string{}
	if p.Spec.Critical.NamespaceSelector != nil {
		l, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		for _, ns := range l.Items {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	var out []WorkloadRef
	add := func(kind Kind, meta metav1.ObjectMeta, tmpl corev1.PodTemplateSpec) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: meta.Namespace, Labels: tmpl.Labels},
			Spec:       corev1.PodSpec{PriorityClassName: tmpl.Spec.PriorityClassName},
		}
		if sel.Matches(pod, nsLabels[meta.Namespace]) {
			out = append(out, WorkloadRef{Namespace: meta.Namespace, Kind: kind, Name: meta.Name})
		}
	}
	for _, ns := range namespaces {
		ds, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list Deployments: %w", err)
		}
		for _, o := range ds.Items {
			add(KindDeployment, o.ObjectMeta, o.Spec.Template)
		}
		dss, err := client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list DaemonSets: %w", err)
		}
		for _, o := range dss.Items {
			add(KindDaemonSet, o.ObjectMeta, o.Spec.Template)
		}
		sts, err := client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list StatefulSets: %w", err)
		}
		for _, o := range sts.Items {
			add(KindStatefulSet, o.ObjectMeta, o.Spec.Template)
		}
	}
	if len(out) == 0 {
		return nil, BadInput(errors.New("policy " + p.Name + " selects no Deployment, DaemonSet or StatefulSet in the cluster: check spec.critical"))
	}
	return Dedupe(out), nil
}
