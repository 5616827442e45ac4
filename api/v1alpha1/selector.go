package v1alpha1

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Matches reports whether pod is critical under c: it matches every
// selector that is set. namespaceLabels are the labels of the pod's
// namespace (nil when unknown: then a namespaceSelector sees no labels).
// An invalid selector gives an error naming the field; a selector that
// selects nothing gives an error too, rather than making every pod critical.
//
// Matches converts the selectors on every call; a planner that checks many
// pods should Compile once and call CompiledCriticalSelector.Matches.
func (c CriticalSelector) Matches(pod *corev1.Pod, namespaceLabels map[string]string) (bool, error) {
	cs, err := c.Compile()
	if err != nil {
		return false, err
	}
	return cs.Matches(pod, namespaceLabels), nil
}

// CompiledCriticalSelector is a CriticalSelector converted once for
// matching many pods. The zero value matches nothing.
// +kubebuilder:object:generate=false
type CompiledCriticalSelector struct {
	valid              bool
	namespaces         sets.Set[string]
	priorityClassNames sets.Set[string]
	namespaceSelector  labels.Selector
	podSelector        labels.Selector
}

// Compile checks c and converts its selectors with
// metav1.LabelSelectorAsSelector. The error names the field and the fix.
func (c CriticalSelector) Compile() (*CompiledCriticalSelector, error) {
	if errs := c.validate(criticalPath); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	cs := &CompiledCriticalSelector{valid: true}
	if len(c.Namespaces) > 0 {
		cs.namespaces = sets.New(c.Namespaces...)
	}
	if len(c.PriorityClassNames) > 0 {
		cs.priorityClassNames = sets.New(c.PriorityClassNames...)
	}
	var err error
	if cs.namespaceSelector, err = asSelector(namespaceSelectorPath, c.NamespaceSelector); err != nil {
		return nil, err
	}
	if cs.podSelector, err = asSelector(podSelectorPath, c.PodSelector); err != nil {
		return nil, err
	}
	return cs, nil
}

// asSelector converts an optional selector; nil stays nil (not set).
func asSelector(path *field.Path, s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: fix the selector", path, err)
	}
	return sel, nil
}

// Matches reports whether pod matches every selector that is set.
func (cs *CompiledCriticalSelector) Matches(pod *corev1.Pod, namespaceLabels map[string]string) bool {
	if cs == nil || !cs.valid || pod == nil {
		return false
	}
	if cs.namespaces != nil && !cs.namespaces.Has(pod.Namespace) {
		return false
	}
	if cs.priorityClassNames != nil && !cs.priorityClassNames.Has(pod.Spec.PriorityClassName) {
		return false
	}
	if cs.podSelector != nil && !cs.podSelector.Matches(labels.Set(pod.Labels)) {
		return false
	}
	if cs.namespaceSelector != nil && !cs.namespaceSelector.Matches(labels.Set(namespaceLabels)) {
		return false
	}
	return true
}

// Describe says in words which pods c selects, e.g. "namespaces
// kube-system; priority classes system-cluster-critical,
// system-node-critical".
func (c CriticalSelector) Describe() string {
	var parts []string
	if len(c.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(c.Namespaces, ", "))
	}
	if len(c.PriorityClassNames) > 0 {
		parts = append(parts, "priority classes "+strings.Join(c.PriorityClassNames, ", "))
	}
	if !selectorEmpty(c.NamespaceSelector) {
		parts = append(parts, "namespace selector "+metav1.FormatLabelSelector(c.NamespaceSelector))
	}
	if !selectorEmpty(c.PodSelector) {
		parts = append(parts, "pod selector "+metav1.FormatLabelSelector(c.PodSelector))
	}
	return strings.Join(parts, "; ")
}
