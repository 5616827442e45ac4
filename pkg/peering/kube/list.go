package kube

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rebound/api/v1alpha1"
	"rebound/pkg/peering"
)

// ListReports lists every PeeringReport through a dynamic client, in pages
// of pageSize (0: one List), and reads each with ReportFromAPI. A report
// that cannot be read is left out, as the controller leaves it out, and
// its error is returned in skipped for the caller to show. The List's own
// error is returned as the apiserver gave it, so that each caller decides
// what a missing CRD or a forbidden list means to it.
func ListReports(ctx context.Context, client dynamic.Interface, pageSize int64) (reports []peering.Report, skipped []error, err error) {
	objs, skipped, err := ListReportObjects(ctx, client, pageSize)
	if err != nil {
		return nil, nil, err
	}
	for i := range objs {
		r, err := ReportFromAPI(&objs[i])
		if err != nil {
			skipped = append(skipped, fmt.Errorf("PeeringReport %s unreadable: %w", objs[i].Name, err))
			continue
		}
		reports = append(reports, r)
	}
	return reports, skipped, nil
}

// ListReportObjects lists every PeeringReport as the API holds it, for a
// caller that reads parts ReportFromAPI leaves out (the fencing block). An
// object that does not decode is left out with its error in skipped; the
// List's own error is returned as the apiserver gave it.
func ListReportObjects(ctx context.Context, client dynamic.Interface, pageSize int64) (objs []v1alpha1.PeeringReport, skipped []error, err error) {
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		l, err := client.Resource(v1alpha1.PeeringReports).List(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		for i := range l.Items {
			var obj v1alpha1.PeeringReport
			data, err := json.Marshal(l.Items[i].Object)
			if err == nil {
				err = json.Unmarshal(data, &obj)
			}
			if err != nil {
				skipped = append(skipped, fmt.Errorf("PeeringReport %s unreadable: %w", l.Items[i].GetName(), err))
				continue
			}
			objs = append(objs, obj)
		}
		if l.GetContinue() == "" {
			return objs, skipped, nil
		}
		opts.Continue = l.GetContinue()
	}
}

// ApplyReport writes obj, a PeeringReport holding only the fields
// fieldManager owns, with one forced server-side apply and no read before
// it: it creates the object the first time and replaces those fields
// afterwards. The agent's BGP writer and its gossip writer apply to the
// same object under managers of their own, so neither removes or
// overwrites the other's fields (RBAC: create and patch only).
func ApplyReport(ctx context.Context, client dynamic.Interface, obj *v1alpha1.PeeringReport, fieldManager string) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	force := true
	_, err = client.Resource(v1alpha1.PeeringReports).Patch(ctx, obj.Name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force})
	return err
}
