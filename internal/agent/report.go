package agent

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rebound/api/v1alpha1"
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
	data, err := json.Marshal(kube.ReportToAPI(r))
	if err != nil {
		return err
	}
	force := true
	_, err = w.Client.Resource(v1alpha1.PeeringReports).Patch(ctx, r.Reporter, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("write PeeringReport %s: %w", r.Reporter, err)
	}
	return nil
}
