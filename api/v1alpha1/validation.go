package v1alpha1

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validation in Go, the same checks as the CRD's OpenAPI schema and CEL
// rules (recoverypolicy_types.go), for the controller, which treats an
// invalid policy as a terminal error, and for policies built in code (the
// restore's planning policy). Files are judged by pkg/policyfile, which runs
// the apiserver's own code on the CRD.
//
// The messages of the checks that the API server does with CEL are the CEL
// messages word for word (crd_test.go checks it); they name the field and
// say how to fix it.

// Limits of the API, as in the CRD's markers.
const (
	maxNamespaces          = 100
	maxPriorityClassNames  = 20
	maxActions             = 2
	minActionsPerMinute    = 1
	maxActionsPerMinuteLim = 1000
	minConcurrent          = 1
	maxConcurrentLim       = 100
)

// The CEL messages. Selector messages take the selector's path.
const (
	msgMaxUnavailableTime = "spec.maxUnavailableTime must be between 0s and 1h: set a duration such as 30s"
	msgDuplicateAction    = "spec.actions must not repeat an action: list each of DeleteAndReplace, ScaleBounce at most once"
	msgCriticalNothing    = "spec.critical selects nothing: set at least one of namespaces, priorityClassNames, namespaceSelector or podSelector (a selector needs matchLabels or matchExpressions)"

	fmtSelectorOperator    = "%s.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"
	fmtSelectorNeedsValues = "%s.matchExpressions[].values must list at least one value when the operator is In or NotIn"
	fmtSelectorNoValues    = "%s.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist: remove the values"
)

var (
	specPath              = field.NewPath("spec")
	criticalPath          = specPath.Child("critical")
	namespaceSelectorPath = criticalPath.Child("namespaceSelector")
	podSelectorPath       = criticalPath.Child("podSelector")

	validOperators = []string{
		string(metav1.LabelSelectorOpIn), string(metav1.LabelSelectorOpNotIn),
		string(metav1.LabelSelectorOpExists), string(metav1.LabelSelectorOpDoesNotExist),
	}
	validActions      = []string{string(DeleteAndReplace), string(ScaleBounce)}
	validFencingModes = []string{string(OutOfServiceTaint), string(Watchdog), string(Never)}
	validDetections   = []string{string(DetectionNotReady), string(DetectionTwoPlanes)}

	maxMaxUnavailableTime = mustParseDuration(MaxMaxUnavailableTime)
)

// celMessages lists every CEL message of the CRD, for crd_test.go.
func celMessages() []string {
	m := []string{msgMaxUnavailableTime, msgDuplicateAction, msgCriticalNothing}
	for _, p := range []*field.Path{namespaceSelectorPath, podSelectorPath} {
		m = append(m,
			fmt.Sprintf(fmtSelectorOperator, p),
			fmt.Sprintf(fmtSelectorNeedsValues, p),
			fmt.Sprintf(fmtSelectorNoValues, p))
	}
	return m
}

// Validate returns every way p is invalid, with the field's path and the
// fix, as the API server would; nil when p is valid. Unset fields are valid
// (they take their defaults), so it may run before or after Default.
func (p *RecoveryPolicy) Validate() field.ErrorList {
	var errs field.ErrorList
	if p.APIVersion != "" && p.APIVersion != GroupVersion.String() {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), p.APIVersion,
			fmt.Sprintf("apiVersion must be %s", GroupVersion)))
	}
	if p.Kind != "" && p.Kind != "RecoveryPolicy" {
		errs = append(errs, field.Invalid(field.NewPath("kind"), p.Kind, "kind must be RecoveryPolicy"))
	}
	name := field.NewPath("metadata", "name")
	switch {
	case p.Name == "" && p.GenerateName == "":
		errs = append(errs, field.Required(name, "metadata.name: set a name, e.g. default"))
	case p.Name != "":
		for _, msg := range validation.IsDNS1123Subdomain(p.Name) {
			errs = append(errs, field.Invalid(name, p.Name, "metadata.name "+msg))
		}
	}
	return append(errs, p.Spec.validate(specPath)...)
}

func (s *RecoveryPolicySpec) validate(path *field.Path) field.ErrorList {
	errs := s.Critical.validate(path.Child("critical"))

	if d := s.MaxUnavailableTime; d != nil && (d.Duration < 0 || d.Duration > maxMaxUnavailableTime) {
		errs = append(errs, field.Invalid(path.Child("maxUnavailableTime"), d.Duration.String(), msgMaxUnavailableTime))
	}

	actions := path.Child("actions")
	switch {
	case s.Actions != nil && len(s.Actions) == 0:
		errs = append(errs, field.Required(actions,
			"spec.actions must list at least one action (DeleteAndReplace, ScaleBounce), or be left out for both"))
	case len(s.Actions) > maxActions:
		errs = append(errs, field.TooMany(actions, len(s.Actions), maxActions))
	}
	seen := sets.New[RescueAction]()
	for i, a := range s.Actions {
		if !slices.Contains(validActions, string(a)) {
			errs = append(errs, field.NotSupported(actions.Index(i), a, validActions))
		} else if seen.Has(a) {
			errs = append(errs, field.Invalid(actions, s.Actions, msgDuplicateAction))
		}
		seen.Insert(a)
	}

	if m := s.Fencing.Mode; m != "" && !slices.Contains(validFencingModes, string(m)) {
		errs = append(errs, field.NotSupported(path.Child("fencing", "mode"), m, validFencingModes))
	}

	if d := s.Detection; d != "" && !slices.Contains(validDetections, string(d)) {
		errs = append(errs, field.NotSupported(path.Child("detection"), d, validDetections))
	}

	limits := path.Child("limits")
	errs = append(errs, validateRange(limits.Child("maxActionsPerMinute"), s.Limits.MaxActionsPerMinute,
		minActionsPerMinute, maxActionsPerMinuteLim, crdDefaults.maxActionsPerMinute)...)
	errs = append(errs, validateRange(limits.Child("maxConcurrent"), s.Limits.MaxConcurrent,
		minConcurrent, maxConcurrentLim, crdDefaults.maxConcurrent)...)
	return errs
}

// validateRange checks an optional limit; 0 is unset.
func validateRange(path *field.Path, v, lo, hi, def int32) field.ErrorList {
	if v == 0 || (v >= lo && v <= hi) {
		return nil
	}
	return field.ErrorList{field.Invalid(path, v,
		fmt.Sprintf("%s must be between %d and %d: set a value in range or leave it out for the default %d", path, lo, hi, def))}
}

// selectsSomething reports whether at least one selector restricts the
// pods; an empty selector matches everything.
func (c *CriticalSelector) selectsSomething() bool {
	return len(c.Namespaces) > 0 || len(c.PriorityClassNames) > 0 ||
		!selectorEmpty(c.NamespaceSelector) || !selectorEmpty(c.PodSelector)
}

func selectorEmpty(s *metav1.LabelSelector) bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

func (c *CriticalSelector) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !c.selectsSomething() {
		errs = append(errs, field.Required(path, msgCriticalNothing))
	}

	errs = append(errs, validateNameList(path.Child("namespaces"), c.Namespaces, maxNamespaces,
		validation.IsDNS1123Label, "a namespace name such as kube-system")...)
	errs = append(errs, validateNameList(path.Child("priorityClassNames"), c.PriorityClassNames, maxPriorityClassNames,
		validation.IsDNS1123Subdomain, "a PriorityClass name such as system-cluster-critical")...)

	errs = append(errs, validateSelector(path.Child("namespaceSelector"), c.NamespaceSelector)...)
	errs = append(errs, validateSelector(path.Child("podSelector"), c.PodSelector)...)
	return errs
}

// validateNameList checks a listType=set of names: length, format, no
// duplicates.
func validateNameList(path *field.Path, names []string, maxLen int, valid func(string) []string, example string) field.ErrorList {
	var errs field.ErrorList
	if len(names) > maxLen {
		errs = append(errs, field.TooMany(path, len(names), maxLen))
	}
	seen, reported := sets.New[string](), sets.New[string]()
	for i, n := range names {
		if msgs := valid(n); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Index(i), n,
				fmt.Sprintf("%s must be %s: %s", path.Index(i), example, msgs[0])))
		}
		if seen.Has(n) && !reported.Has(n) {
			errs = append(errs, field.Duplicate(path.Index(i), n))
			reported.Insert(n)
		}
		seen.Insert(n)
	}
	return errs
}

// validateSelector checks what the CRD checks (operators and values) and
// what metav1.LabelSelectorAsSelector would reject (keys and values that are
// not valid labels), so that a policy that passes Validate always converts.
func validateSelector(path *field.Path, s *metav1.LabelSelector) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	for _, k := range sortedKeys(s.MatchLabels) {
		p := path.Child("matchLabels").Key(k)
		errs = append(errs, validateLabelKey(p, k)...)
		if msgs := validation.IsValidLabelValue(s.MatchLabels[k]); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p, s.MatchLabels[k],
				fmt.Sprintf("%s must be a valid label value: %s", p, msgs[0])))
		}
	}
	for i, e := range s.MatchExpressions {
		p := path.Child("matchExpressions").Index(i)
		errs = append(errs, validateLabelKey(p.Child("key"), e.Key)...)
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
			if len(e.Values) == 0 {
				errs = append(errs, field.Invalid(p.Child("values"), e.Values, fmt.Sprintf(fmtSelectorNeedsValues, path)))
			}
		case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
			if len(e.Values) > 0 {
				errs = append(errs, field.Invalid(p.Child("values"), e.Values, fmt.Sprintf(fmtSelectorNoValues, path)))
			}
		default:
			errs = append(errs, field.Invalid(p.Child("operator"), e.Operator, fmt.Sprintf(fmtSelectorOperator, path)))
		}
		for j, v := range e.Values {
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				errs = append(errs, field.Invalid(p.Child("values").Index(j), v,
					fmt.Sprintf("%s must be a valid label value: %s", p.Child("values").Index(j), msgs[0])))
			}
		}
	}
	return errs
}

func validateLabelKey(path *field.Path, k string) field.ErrorList {
	if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(path, k,
			fmt.Sprintf("%s must be a valid label key such as app.kubernetes.io/name: %s", path, msgs[0]))}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func mustParseDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}
