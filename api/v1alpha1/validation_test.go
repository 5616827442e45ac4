package v1alpha1

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	kjson "sigs.k8s.io/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// policyYAML wraps a spec in a RecoveryPolicy named "test".
func policyYAML(spec string) string {
	return "apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata:\n  name: test\nspec:\n" + indent(spec, "  ")
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

const kubeSystem = "critical:\n  namespaces: [kube-system]\n"

// validationCases run through both Validate (after Default, as a CLI does)
// and the API server's validators on the generated CRD: both must agree,
// and each wanted string must be in the errors of both, unless the case says
// the layers differ on purpose.
var validationCases = []struct {
	name string
	spec string
	// want are substrings of the errors; none means valid.
	want []string
	// onlyAPI / onlyGo: strings expected from one layer only (the
	// messages of OpenAPI checks are the API server's own).
	onlyAPI, onlyGo []string
	// goValid: the API rejects it but Go cannot see the problem (a number
	// set to 0 is, in Go, a number left out).
	goValid bool
	// apiValid: Go is stricter than the API (label key and value syntax,
	// which metav1.LabelSelectorAsSelector rejects, cost too much in CEL).
	apiValid bool
}{
	{name: "minimal", spec: kubeSystem},
	{name: "everything set", spec: kubeSystem + `  priorityClassNames: [system-cluster-critical, system-node-critical]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: kube-system}
  podSelector:
    matchExpressions:
    - {key: app, operator: In, values: [coredns]}
    - {key: tier, operator: NotIn, values: [batch]}
    - {key: k8s-app, operator: Exists}
    - {key: skip, operator: DoesNotExist}
maxUnavailableTime: 45s
actions: [ScaleBounce, DeleteAndReplace]
fencing: {mode: Never}
limits: {maxActionsPerMinute: 1000, maxConcurrent: 100}
dryRun: true
suspend: true
`},
	{name: "maxUnavailableTime 0s", spec: kubeSystem + "maxUnavailableTime: 0s\n"},
	{name: "maxUnavailableTime 1h", spec: kubeSystem + "maxUnavailableTime: 1h\n"},
	{name: "maxUnavailableTime 59m60s", spec: kubeSystem + "maxUnavailableTime: 59m60s\n"},
	{name: "maxUnavailableTime negative", spec: kubeSystem + "maxUnavailableTime: -5s\n",
		want: []string{"spec.maxUnavailableTime", msgMaxUnavailableTime}},
	{name: "maxUnavailableTime over 1h", spec: kubeSystem + "maxUnavailableTime: 1h0m1s\n",
		want: []string{"spec.maxUnavailableTime", msgMaxUnavailableTime}},
	{name: "maxUnavailableTime in days", spec: kubeSystem + "maxUnavailableTime: 1d\n",
		// Accepted by OpenAPI's duration format but not by Go's
		// time.ParseDuration: the pattern keeps it out of the API, where it
		// would break every Go client's decoding.
		want: []string{"spec.maxUnavailableTime"}, onlyAPI: []string{"should match"},
		onlyGo: []string{"spec.maxUnavailableTime must be a duration such as 30s"}},
	{name: "maxUnavailableTime not a duration", spec: kubeSystem + "maxUnavailableTime: soon\n",
		want: []string{"spec.maxUnavailableTime"}, onlyGo: []string{"spec.maxUnavailableTime must be a duration such as 30s"}},
	{name: "maxUnavailableTime a number", spec: kubeSystem + "maxUnavailableTime: 30\n",
		want: []string{"spec.maxUnavailableTime"}, onlyGo: []string{"spec.maxUnavailableTime must be a duration such as 30s"}},
	{name: "unknown field", spec: kubeSystem + "retries: 3\n", apiValid: true, // pruned, a warning at the API
		want: []string{"<document>", `unknown field "spec.retries"`}},
	{name: "unknown action", spec: kubeSystem + "actions: [DeleteAndReplace, Reboot]\n",
		want: []string{`spec.actions[1]: Unsupported value: "Reboot": supported values: "DeleteAndReplace", "ScaleBounce"`}},
	{name: "duplicate action", spec: kubeSystem + "actions: [ScaleBounce, ScaleBounce]\n",
		want: []string{"spec.actions", msgDuplicateAction}},
	{name: "no action", spec: kubeSystem + "actions: []\n",
		want: []string{"spec.actions"}, onlyAPI: []string{"should have at least 1 items"}, onlyGo: []string{"at least one action"}},
	{name: "three actions", spec: kubeSystem + "actions: [DeleteAndReplace, ScaleBounce, DeleteAndReplace]\n",
		want: []string{"spec.actions: Too many: 3: must have at most 2 items"}},
	{name: "critical empty", spec: "critical: {}\n",
		want: []string{"spec.critical", msgCriticalNothing}},
	{name: "critical empty lists and selectors", spec: "critical:\n  namespaces: []\n  priorityClassNames: []\n  podSelector: {}\n  namespaceSelector: {matchLabels: {}}\n",
		want: []string{"spec.critical", msgCriticalNothing}},
	{name: "critical missing", spec: "dryRun: true\n",
		want: []string{"spec.critical"}, onlyAPI: []string{"Required value"}, onlyGo: []string{msgCriticalNothing}},
	{name: "critical by pod selector alone", spec: "critical:\n  podSelector: {matchLabels: {app: coredns}}\n"},
	{name: "critical by priority class alone", spec: "critical:\n  priorityClassNames: [system-node-critical]\n"},
	{name: "pod selector bad operator", spec: kubeSystem + "  podSelector:\n    matchExpressions: [{key: app, operator: Equals, values: [x]}]\n",
		want:   []string{"spec.critical.podSelector", "spec.critical.podSelector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"},
		onlyGo: []string{"spec.critical.podSelector.matchExpressions[0].operator: Invalid value: \"Equals\""}},
	{name: "namespace selector bad operator", spec: kubeSystem + "  namespaceSelector:\n    matchExpressions: [{key: team, operator: in, values: [x]}]\n",
		want: []string{"spec.critical.namespaceSelector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"}},
	{name: "In without values", spec: kubeSystem + "  podSelector:\n    matchExpressions: [{key: app, operator: In}]\n",
		want: []string{"spec.critical.podSelector.matchExpressions[].values must list at least one value when the operator is In or NotIn"}},
	{name: "NotIn with empty values", spec: kubeSystem + "  namespaceSelector:\n    matchExpressions: [{key: app, operator: NotIn, values: []}]\n",
		want: []string{"spec.critical.namespaceSelector.matchExpressions[].values must list at least one value when the operator is In or NotIn"}},
	{name: "Exists with values", spec: kubeSystem + "  podSelector:\n    matchExpressions: [{key: app, operator: Exists, values: [x]}]\n",
		want: []string{"spec.critical.podSelector.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist: remove the values"}},
	{name: "bad label key", spec: kubeSystem + "  podSelector:\n    matchLabels: {\"not a key\": x}\n",
		want: []string{"spec.critical.podSelector.matchLabels[not a key]", "must be a valid label key"}, apiValid: true},
	{name: "bad label value", spec: kubeSystem + "  podSelector:\n    matchExpressions: [{key: app, operator: In, values: [\"a b\"]}]\n",
		want: []string{"spec.critical.podSelector.matchExpressions[0].values[0]", "must be a valid label value"}, apiValid: true},
	{name: "bad namespace name", spec: "critical:\n  namespaces: [Kube_System]\n",
		want: []string{"spec.critical.namespaces[0]"}, onlyGo: []string{"must be a namespace name such as kube-system"}},
	{name: "duplicate namespace", spec: "critical:\n  namespaces: [a, a]\n",
		want: []string{`spec.critical.namespaces[1]: Duplicate value: "a"`}},
	{name: "too many priority classes", spec: "critical:\n  priorityClassNames: [" + strings.Repeat("p,", 20) + "q]\n",
		want: []string{"spec.critical.priorityClassNames: Too many: 21: must have at most 20 items"}},
	{name: "bad priority class", spec: "critical:\n  priorityClassNames: [-critical]\n",
		want: []string{"spec.critical.priorityClassNames[0]"}},
	{name: "unknown fencing mode", spec: kubeSystem + "fencing: {mode: Sometimes}\n",
		want: []string{`spec.fencing.mode: Unsupported value: "Sometimes": supported values: "OutOfServiceTaint", "Watchdog", "Never"`}},
	{name: "rate over limit", spec: kubeSystem + "limits: {maxActionsPerMinute: 1001}\n",
		want: []string{"spec.limits.maxActionsPerMinute"}, onlyAPI: []string{"should be less than or equal to 1000"},
		onlyGo: []string{"spec.limits.maxActionsPerMinute must be between 1 and 1000"}},
	{name: "rate negative", spec: kubeSystem + "limits: {maxActionsPerMinute: -1}\n",
		want: []string{"spec.limits.maxActionsPerMinute"}, onlyAPI: []string{"should be greater than or equal to 1"}},
	{name: "rate zero", spec: kubeSystem + "limits: {maxActionsPerMinute: 0}\n",
		want: []string{"spec.limits.maxActionsPerMinute"}, goValid: true},
	{name: "concurrency over limit", spec: kubeSystem + "limits: {maxConcurrent: 101}\n",
		want: []string{"spec.limits.maxConcurrent"}, onlyAPI: []string{"should be less than or equal to 100"},
		onlyGo: []string{"spec.limits.maxConcurrent must be between 1 and 100"}},
}

// goValidate decodes a policy strictly, defaults and validates it with
// the Go checks (files are judged by pkg/policyfile with the apiserver's
// code; the Go checks must agree with it).
func goValidate(doc string) []string {
	_, errs := ParseRecoveryPolicy([]byte(doc))
	return errorStrings(errs)
}

func apiValidate(t *testing.T, api *apiServer, doc string) []string {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatalf("test YAML: %v", err)
	}
	return errorStrings(api.create(obj))
}

func errorStrings(errs field.ErrorList) []string {
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return s
}

func TestValidateAgreesWithAPIServer(t *testing.T) {
	api := newAPIServer(t)
	for _, tc := range validationCases {
		t.Run(tc.name, func(t *testing.T) {
			doc := policyYAML(tc.spec)
			check := func(layer string, errs []string, valid bool, want []string) {
				t.Helper()
				for _, e := range errs {
					t.Logf("%s: %s", layer, e)
				}
				if valid {
					if len(errs) > 0 {
						t.Errorf("%s rejects a valid policy:\n  %s", layer, strings.Join(errs, "\n  "))
					}
					return
				}
				if len(errs) == 0 {
					t.Errorf("%s accepts an invalid policy, want errors containing %q", layer, want)
					return
				}
				all := strings.Join(errs, "\n")
				for _, w := range want {
					if !strings.Contains(all, w) {
						t.Errorf("%s errors do not contain %q:\n  %s", layer, w, strings.Join(errs, "\n  "))
					}
				}
				for _, e := range errs {
					if !strings.Contains(e, "spec.") && !strings.Contains(e, "metadata.") {
						t.Errorf("%s error does not name a field: %s", layer, e)
					}
				}
			}
			invalid := len(tc.want) > 0
			check("API server", apiValidate(t, api, doc), !invalid || tc.apiValid, append(tc.want, tc.onlyAPI...))
			check("Go", goValidate(doc), !invalid || tc.goValid, append(tc.want, tc.onlyGo...))
		})
	}
}

// TestDefaultAgreesWithAPIServer: Default fills in what the API server's
// defaulting does.
func TestDefaultAgreesWithAPIServer(t *testing.T) {
	api := newAPIServer(t)
	for _, spec := range []string{
		kubeSystem,
		kubeSystem + "fencing: {}\nlimits: {maxConcurrent: 2}\n",
		kubeSystem + "maxUnavailableTime: 5s\nactions: [ScaleBounce]\nfencing: {mode: Never}\n",
	} {
		doc := policyYAML(spec)
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if errs := api.create(obj); len(errs) > 0 {
			t.Fatalf("API server rejects %q: %v", spec, errs)
		}
		fromAPI := decodePolicy(t, obj)

		var fromGo RecoveryPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &fromGo); err != nil {
			t.Fatal(err)
		}
		fromGo.Spec.Default()
		if !reflect.DeepEqual(fromAPI.Spec, fromGo.Spec) {
			t.Errorf("spec %q:\nAPI server defaults to %+v\nDefault gives         %+v", spec, fromAPI.Spec, fromGo.Spec)
		}
	}
}

func decodePolicy(t *testing.T, obj map[string]any) RecoveryPolicy {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var p RecoveryPolicy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestDefault(t *testing.T) {
	full := RecoveryPolicySpec{
		MaxUnavailableTime: duration(30 * time.Second),
		Detection:          DetectionNotReady,
		Actions:            []RescueAction{DeleteAndReplace, ScaleBounce},
		Fencing:            FencingPolicy{Mode: OutOfServiceTaint},
		Limits:             Limits{MaxActionsPerMinute: 10, MaxConcurrent: 5},
	}
	for _, tc := range []struct {
		name     string
		in, want RecoveryPolicySpec
	}{
		{name: "empty", in: RecoveryPolicySpec{}, want: full},
		{name: "already defaulted", in: full, want: full},
		{
			name: "set fields kept",
			in: RecoveryPolicySpec{
				MaxUnavailableTime: duration(0),
				Detection:          DetectionTwoPlanes,
				Actions:            []RescueAction{ScaleBounce},
				Fencing:            FencingPolicy{Mode: Never},
				Limits:             Limits{MaxActionsPerMinute: 1},
				DryRun:             true,
			},
			want: RecoveryPolicySpec{
				MaxUnavailableTime: duration(0),
				Detection:          DetectionTwoPlanes,
				Actions:            []RescueAction{ScaleBounce},
				Fencing:            FencingPolicy{Mode: Never},
				Limits:             Limits{MaxActionsPerMinute: 1, MaxConcurrent: 5},
				DryRun:             true,
			},
		},
		{
			// An empty list is set, not left out: Validate rejects it, as
			// the API server does.
			name: "empty actions kept",
			in:   RecoveryPolicySpec{Actions: []RescueAction{}},
			want: RecoveryPolicySpec{
				MaxUnavailableTime: full.MaxUnavailableTime,
				Detection:          full.Detection,
				Actions:            []RescueAction{},
				Fencing:            full.Fencing,
				Limits:             full.Limits,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := *tc.in.DeepCopy()
			got.Default()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Default:\n got %+v\nwant %+v", got, tc.want)
			}
			again := *got.DeepCopy()
			again.Default()
			if !reflect.DeepEqual(again, got) {
				t.Errorf("Default is not idempotent: %+v then %+v", got, again)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	valid := func() *RecoveryPolicy {
		p := &RecoveryPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "default"},
			Spec:       RecoveryPolicySpec{Critical: CriticalSelector{Namespaces: []string{"kube-system"}}},
		}
		p.Spec.Default()
		return p
	}
	for _, tc := range []struct {
		name   string
		mutate func(*RecoveryPolicy)
		want   []string // exact field paths of the errors, in order
	}{
		{name: "valid", mutate: func(*RecoveryPolicy) {}},
		{name: "valid without defaults", mutate: func(p *RecoveryPolicy) { p.Spec = RecoveryPolicySpec{Critical: p.Spec.Critical} }},
		{name: "valid with type meta", mutate: func(p *RecoveryPolicy) {
			p.TypeMeta = metav1.TypeMeta{APIVersion: "rebound.dev/v1alpha1", Kind: "RecoveryPolicy"}
		}},
		{name: "wrong apiVersion and kind", mutate: func(p *RecoveryPolicy) {
			p.TypeMeta = metav1.TypeMeta{APIVersion: "rebound.dev/v1", Kind: "Policy"}
		}, want: []string{"apiVersion", "kind"}},
		{name: "no name", mutate: func(p *RecoveryPolicy) { p.Name = "" }, want: []string{"metadata.name"}},
		{name: "generateName", mutate: func(p *RecoveryPolicy) { p.Name, p.GenerateName = "", "policy-" }},
		{name: "bad name", mutate: func(p *RecoveryPolicy) { p.Name = "Default" }, want: []string{"metadata.name"}},
		{name: "negative time", mutate: func(p *RecoveryPolicy) { p.Spec.MaxUnavailableTime = duration(-time.Second) },
			want: []string{"spec.maxUnavailableTime"}},
		{name: "time over 1h", mutate: func(p *RecoveryPolicy) { p.Spec.MaxUnavailableTime = duration(time.Hour + 1) },
			want: []string{"spec.maxUnavailableTime"}},
		{name: "unknown and duplicate actions", mutate: func(p *RecoveryPolicy) {
			p.Spec.Actions = []RescueAction{"Reboot", ScaleBounce, ScaleBounce}
		}, want: []string{"spec.actions", "spec.actions[0]", "spec.actions"}},
		{name: "empty actions", mutate: func(p *RecoveryPolicy) { p.Spec.Actions = []RescueAction{} }, want: []string{"spec.actions"}},
		{name: "unknown fencing", mutate: func(p *RecoveryPolicy) { p.Spec.Fencing.Mode = "Maybe" }, want: []string{"spec.fencing.mode"}},
		{name: "unknown detection", mutate: func(p *RecoveryPolicy) { p.Spec.Detection = "Gossip" }, want: []string{"spec.detection"}},
		{name: "limits out of range", mutate: func(p *RecoveryPolicy) { p.Spec.Limits = Limits{MaxActionsPerMinute: -1, MaxConcurrent: 101} },
			want: []string{"spec.limits.maxActionsPerMinute", "spec.limits.maxConcurrent"}},
		{name: "selects nothing", mutate: func(p *RecoveryPolicy) {
			p.Spec.Critical = CriticalSelector{PodSelector: &metav1.LabelSelector{}}
		}, want: []string{"spec.critical"}},
		{name: "bad selectors", mutate: func(p *RecoveryPolicy) {
			p.Spec.Critical.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a/b"}}
			p.Spec.Critical.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: "Equals", Values: []string{"x"}},
				{Key: "app", Operator: metav1.LabelSelectorOpIn},
				{Key: "-bad", Operator: metav1.LabelSelectorOpExists, Values: []string{"x"}},
			}}
		}, want: []string{
			"spec.critical.namespaceSelector.matchLabels[team]",
			"spec.critical.podSelector.matchExpressions[0].operator",
			"spec.critical.podSelector.matchExpressions[1].values",
			"spec.critical.podSelector.matchExpressions[2].key",
			"spec.critical.podSelector.matchExpressions[2].values",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := valid()
			tc.mutate(p)
			errs := p.Validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
				// The CEL messages, shared with the CRD, write list indices as [].
				generic := listIndex.ReplaceAllString(e.Field, "[]")
				if e.Detail != "" && !strings.Contains(e.Detail, e.Field) && !strings.Contains(e.Detail, generic) &&
					e.Type != field.ErrorTypeNotSupported &&
					e.Type != field.ErrorTypeTooMany && e.Type != field.ErrorTypeDuplicate {
					t.Errorf("detail does not name the field %s: %q", e.Field, e.Detail)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("error fields = %q, want %q\n%v", got, tc.want, errs)
			}
		})
	}
}

var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

func TestEffectiveMaxUnavailableTime(t *testing.T) {
	for _, tc := range []struct {
		in   *metav1.Duration
		want time.Duration
	}{
		{nil, 30 * time.Second},
		{duration(0), 0},
		{duration(10 * time.Second), 10 * time.Second},
		{duration(-time.Second), 0},
		{duration(2 * time.Hour), time.Hour},
	} {
		s := RecoveryPolicySpec{MaxUnavailableTime: tc.in}
		if got := s.EffectiveMaxUnavailableTime(); got != tc.want {
			t.Errorf("EffectiveMaxUnavailableTime(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func pod(ns, priorityClass string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: labels},
		Spec:       corev1.PodSpec{PriorityClassName: priorityClass},
	}
}

func TestMatches(t *testing.T) {
	kubeSystemNS := map[string]string{"kubernetes.io/metadata.name": "kube-system"}
	defaultPolicy := CriticalSelector{
		Namespaces:         []string{"kube-system"},
		PriorityClassNames: []string{"system-cluster-critical", "system-node-critical"},
	}
	byLabels := CriticalSelector{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}},
		PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"coredns", "calico-kube-controllers"}},
			{Key: "rebound.dev/ignore", Operator: metav1.LabelSelectorOpDoesNotExist},
		}},
	}
	for _, tc := range []struct {
		name     string
		sel      CriticalSelector
		pod      *corev1.Pod
		nsLabels map[string]string
		want     bool
		wantErr  string
	}{
		{name: "default policy: kube-system, cluster-critical", sel: defaultPolicy,
			pod: pod("kube-system", "system-cluster-critical", nil), nsLabels: kubeSystemNS, want: true},
		{name: "default policy: kube-system, node-critical", sel: defaultPolicy,
			pod: pod("kube-system", "system-node-critical", nil), want: true},
		{name: "default policy: kube-system, no priority class", sel: defaultPolicy,
			pod: pod("kube-system", "", nil)},
		{name: "default policy: other namespace", sel: defaultPolicy,
			pod: pod("default", "system-cluster-critical", nil)},
		{name: "namespaces only", sel: CriticalSelector{Namespaces: []string{"a", "b"}}, pod: pod("b", "", nil), want: true},
		{name: "labels: all match", sel: byLabels,
			pod: pod("dns", "", map[string]string{"app": "coredns"}), nsLabels: map[string]string{"tier": "platform"}, want: true},
		{name: "labels: opted out", sel: byLabels,
			pod: pod("dns", "", map[string]string{"app": "coredns", "rebound.dev/ignore": ""}), nsLabels: map[string]string{"tier": "platform"}},
		{name: "labels: other app", sel: byLabels,
			pod: pod("dns", "", map[string]string{"app": "web"}), nsLabels: map[string]string{"tier": "platform"}},
		{name: "labels: namespace labels unknown", sel: byLabels,
			pod: pod("dns", "", map[string]string{"app": "coredns"})},
		{name: "empty pod selector beside a namespace list matches all there",
			sel: CriticalSelector{Namespaces: []string{"a"}, PodSelector: &metav1.LabelSelector{}}, pod: pod("a", "", nil), want: true},
		{name: "nil pod", sel: defaultPolicy},
		{name: "selects nothing", sel: CriticalSelector{PodSelector: &metav1.LabelSelector{}},
			pod: pod("a", "", nil), wantErr: "spec.critical: Required value: " + msgCriticalNothing},
		{name: "bad operator", sel: CriticalSelector{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Equals", Values: []string{"x"}}}}},
			pod: pod("a", "", nil), wantErr: `spec.critical.podSelector.matchExpressions[0].operator: Invalid value: "Equals": spec.critical.podSelector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist`},
		{name: "bad namespace label key", sel: CriticalSelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "x"}}},
			pod: pod("a", "", nil), wantErr: "spec.critical.namespaceSelector.matchLabels[a b]: Invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sel.Matches(tc.pod, tc.nsLabels)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Matches error = %v, want one containing %q", err, tc.wantErr)
				}
				if got {
					t.Error("Matches = true with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Matches: %v", err)
			}
			if got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompiledZeroValueMatchesNothing(t *testing.T) {
	var cs CompiledCriticalSelector
	if cs.Matches(pod("kube-system", "", nil), nil) {
		t.Error("zero CompiledCriticalSelector matches a pod")
	}
	var nilCS *CompiledCriticalSelector
	if nilCS.Matches(pod("kube-system", "", nil), nil) {
		t.Error("nil CompiledCriticalSelector matches a pod")
	}
}

// BenchmarkCompiledMatches is the per-pod cost the planner pays.
func BenchmarkCompiledMatches(b *testing.B) {
	cs, err := CriticalSelector{
		Namespaces:         []string{"kube-system"},
		PriorityClassNames: []string{"system-cluster-critical", "system-node-critical"},
		PodSelector:        &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "control-plane"}},
	}.Compile()
	if err != nil {
		b.Fatal(err)
	}
	p := pod("kube-system", "system-node-critical", map[string]string{"tier": "control-plane", "app": "x"})
	b.ReportAllocs()
	for b.Loop() {
		if !cs.Matches(p, nil) {
			b.Fatal("no match")
		}
	}
}

// ParseRecoveryPolicy decodes one RecoveryPolicy strictly, defaults it and
// runs the Go checks, with every error found.
func ParseRecoveryPolicy(data []byte) (*RecoveryPolicy, field.ErrorList) {
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, field.ErrorList{documentError("not YAML or JSON: " + err.Error())}
	}
	var p RecoveryPolicy
	strictErrs, err := kjson.UnmarshalStrict(doc, &p)
	if err != nil {
		return nil, field.ErrorList{decodeError(doc, err)}
	}
	var errs field.ErrorList
	for _, e := range strictErrs {
		errs = append(errs, documentError(e.Error()+": remove it or correct its spelling"))
	}
	p.Spec.Default()
	errs = append(errs, p.Validate()...)
	return &p, errs
}

func documentError(detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: "<document>", BadValue: field.OmitValueType{}, Detail: detail}
}

// decodeError names the field when the decoder does not: metav1.Duration
// reports only time.ParseDuration's error.
func decodeError(doc []byte, err error) *field.Error {
	var raw struct {
		Spec struct {
			MaxUnavailableTime any `json:"maxUnavailableTime"`
		} `json:"spec"`
	}
	if kjson.UnmarshalCaseSensitivePreserveInts(doc, &raw) == nil && raw.Spec.MaxUnavailableTime != nil {
		s, ok := raw.Spec.MaxUnavailableTime.(string)
		if _, perr := time.ParseDuration(s); !ok || perr != nil {
			return field.Invalid(specPath.Child("maxUnavailableTime"), raw.Spec.MaxUnavailableTime,
				"spec.maxUnavailableTime must be a duration such as 30s, 2m or 1m30s (units ns, us, ms, s, m, h)")
		}
	}
	return documentError("not a RecoveryPolicy: " + err.Error())
}
