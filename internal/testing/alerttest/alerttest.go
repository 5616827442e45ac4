// Package alerttest runs Prometheus alerting-rule unit tests written in
// promtool's test file format (the part of it rebound uses), with
// Prometheus's own rule evaluation (rules.AlertingRule) and PromQL test
// storage (promql/promqltest). The same file therefore also runs with
// `promtool test rules`. Only tests import this package.
package alerttest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"gopkg.in/yaml.v3"
)

// File is a promtool rule test file.
type File struct {
	RuleFiles          []string       `yaml:"rule_files"`
	EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	Tests              []Test         `yaml:"tests"`
}

// Test is one test group: input series and the alerts expected at times.
type Test struct {
	Name           string         `yaml:"name"`
	Interval       model.Duration `yaml:"interval"`
	InputSeries    []Series       `yaml:"input_series"`
	AlertRuleTests []AlertTest    `yaml:"alert_rule_test"`
}

// Series is a series and its values in promtool's expanding notation
// ("0+1x10", "1x20", "_" for a missing sample).
type Series struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

// AlertTest says which alerts of one rule fire at EvalTime.
type AlertTest struct {
	EvalTime  model.Duration `yaml:"eval_time"`
	Alertname string         `yaml:"alertname"`
	ExpAlerts []ExpAlert     `yaml:"exp_alerts"`
}

// ExpAlert is one expected firing alert: its labels besides alertname,
// and optionally its annotations.
type ExpAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// Run runs every test of the file at path as a subtest and returns the
// names of the alerts tested, so that callers can check each alert of the
// rule files is covered.
func Run(t *testing.T, path string) (tested map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f File
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if f.EvaluationInterval == 0 {
		f.EvaluationInterval = model.Duration(time.Minute)
	}
	var groups []rulefmt.RuleGroup
	for _, rf := range f.RuleFiles {
		rgs, errs := rulefmt.ParseFile(filepath.Join(filepath.Dir(path), rf), false, model.UTF8Validation, newParser(), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatalf("rule file %s: %v", rf, errs)
		}
		groups = append(groups, rgs.Groups...)
	}
	tested = map[string]bool{}
	for _, tc := range f.Tests {
		for _, at := range tc.AlertRuleTests {
			tested[at.Alertname] = true
		}
		t.Run(tc.Name, func(t *testing.T) { runTest(t, groups, time.Duration(f.EvaluationInterval), tc) })
	}
	return tested
}

// AlertNames lists the alerts defined in a rule file.
func AlertNames(t *testing.T, path string) []string {
	t.Helper()
	rgs, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, newParser(), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rule file %s: %v", path, errs)
	}
	var out []string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r.Alert)
			}
		}
	}
	return out
}

func newParser() parser.Parser { return parser.NewParser(parser.Options{}) }

func runTest(t *testing.T, groups []rulefmt.RuleGroup, evalInterval time.Duration, tc Test) {
	interval := time.Duration(tc.Interval)
	if interval == 0 {
		interval = time.Minute
	}
	var load strings.Builder
	fmt.Fprintf(&load, "load %s\n", model.Duration(interval))
	for _, s := range tc.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	storage := promqltest.LoadedStorage(t, load.String())
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, promqltest.DefaultMaxSamplesPerQuery)
	query := rules.EngineQueryFunc(engine, storage)

	alerting := map[string]*rules.AlertingRule{}
	p := newParser()
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("alert %s: %v", r.Alert, err)
			}
			alerting[r.Alert] = rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, nil)
		}
	}
	byTime := map[time.Duration][]AlertTest{}
	var end time.Duration
	for _, at := range tc.AlertRuleTests {
		if alerting[at.Alertname] == nil {
			t.Errorf("alert_rule_test names %q, which no rule file defines", at.Alertname)
			continue
		}
		d := time.Duration(at.EvalTime)
		byTime[d] = append(byTime[d], at)
		end = max(end, d)
	}
	ctx := context.Background()
	names := slices.Sorted(maps.Keys(alerting))
	for ts := time.Duration(0); ts <= end; ts += evalInterval {
		now := time.Unix(0, 0).UTC().Add(ts)
		for _, name := range names {
			if _, err := alerting[name].Eval(ctx, 0, now, query, &url.URL{}, 0); err != nil {
				t.Fatalf("eval %s at %s: %v", name, ts, err)
			}
		}
		for _, at := range byTime[ts] {
			checkAlerts(t, alerting[at.Alertname], at)
		}
	}
	for d := range byTime {
		if d%evalInterval != 0 {
			t.Errorf("eval_time %s is not a multiple of the evaluation interval %s", model.Duration(d), model.Duration(evalInterval))
		}
	}
}

func checkAlerts(t *testing.T, rule *rules.AlertingRule, at AlertTest) {
	t.Helper()
	var got []string
	annotations := map[string]labels.Labels{}
	for _, a := range rule.ActiveAlerts() {
		if a.State != rules.StateFiring {
			continue
		}
		ls := a.Labels.String()
		got = append(got, ls)
		annotations[ls] = a.Annotations
	}
	var want []string
	for _, e := range at.ExpAlerts {
		m := maps.Clone(e.ExpLabels)
		if m == nil {
			m = map[string]string{}
		}
		m["alertname"] = at.Alertname
		ls := labels.FromMap(m).String()
		want = append(want, ls)
		for k, v := range e.ExpAnnotations {
			if a, ok := annotations[ls]; ok && a.Get(k) != v {
				t.Errorf("%s at %s: annotation %s = %q, want %q", at.Alertname, at.EvalTime, k, a.Get(k), v)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s at %s: firing %v, want %v", at.Alertname, at.EvalTime, got, want)
	}
}
