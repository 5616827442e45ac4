// Package monitoring holds rebound's Prometheus alerting rules
// (alerts.yaml) and their unit tests; it has no Go code of its own.
package monitoring

import (
	"testing"

	"rebound/internal/testing/alerttest"
)

// TestAlertRules runs alerts_test.yaml with Prometheus's rule evaluation:
// every alert fires on its series and stays silent on healthy ones, and
// every alert of alerts.yaml is tested.
func TestAlertRules(t *testing.T) {
	tested := alerttest.Run(t, "alerts_test.yaml")
	for _, name := range alerttest.AlertNames(t, "alerts.yaml") {
		if !tested[name] {
			t.Errorf("alert %s has no test in alerts_test.yaml", name)
		}
	}
}
