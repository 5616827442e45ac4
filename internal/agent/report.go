package agent

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"

	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// ReportWriter writes this node's PeeringReport. The agent's credential
// may write no other object (deploy/agent: RBAC plus a
// ValidatingAdmissionPolicy on the node name bound into its token).
type ReportWriter interface {
	WriteReport(ctx context.Context, r peering.Report) error
}

// fieldManager owns the report's fields in server-side apply.
const fieldManager = "rebound-agent"

// APIReportWriter writes reports with one server-side apply each: it
// creates the object the first time and replaces the report afterwards,
// with no read before the write (RBAC: create and patch only).
type APIReportWriter struct {
	Client dynamic.Interface
}

// WriteReport applies the report.
func (w APIReportWriter) WriteReport(ctx context.Context, r peering.Report) error {
	err := kube.ApplyReport(ctx, w.Client, kube.ReportToAPI(r), fieldManager)
	if err != nil {
		return fmt.Errorf("write PeeringReport %s: %w", r.Reporter, err)
	}
	return nil
}
