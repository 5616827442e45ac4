package feeder

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/peering/kube"
)

// FieldManager owns the report's fencing field in server-side apply, so
// that the agent's BGP and gossip writers, under managers of their own,
// never remove or overwrite it, nor it theirs.
const FieldManager = "rebound-agent-fencing"

// APILeases reads the node's Lease from the apiserver by quorum: a GET
// with no resourceVersion is served from etcd, never from the watch
// cache, so a renewal it shows happened.
type APILeases struct {
	Client kubernetes.Interface
	Node   string
}

// ReadLease returns the Lease's renewal: its renewTime, to the
// microsecond as the kubelet wrote it, and its holder. Nothing else of
// the object counts (a label or an owner reference is not a renewal).
func (l APILeases) ReadLease(ctx context.Context) (fencing.Renewal, error) {
	lease, err := l.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, l.Node, metav1.GetOptions{})
	if err != nil {
		return fencing.Renewal{}, fmt.Errorf("read Lease %s/%s: %w", corev1.NamespaceNodeLease, l.Node, err)
	}
	var r fencing.Renewal
	if lease.Spec.RenewTime != nil {
		r.RenewTime = lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	if lease.Spec.HolderIdentity != nil {
		r.Holder = *lease.Spec.HolderIdentity
	}
	return r, nil
}

// APIReports writes the fencing field of the node's PeeringReport with
// one forced server-side apply under FieldManager, conditional on the
// report's resourceVersion, and reads it back by quorum.
type APIReports struct {
	Client dynamic.Interface
	Node   string
}

// WriteFencing applies r as the report's fencing field, on the report as
// a quorum read finds it just before: the apply carries that
// resourceVersion, so the apiserver applies it only if nothing was
// written to the report since. A write the agent gave up on (its call
// timed out) can then never be applied after a later one of its own,
// such as the disarmed report written before a magic close: whichever of
// the two the apiserver takes second is refused. A report that does not
// exist yet is created, which fails if another writer created it first.
func (w APIReports) WriteFencing(ctx context.Context, r v1alpha1.FencingReport) error {
	u, err := w.Client.Resource(v1alpha1.PeeringReports).Get(ctx, w.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return w.create(ctx, r)
	case err != nil:
		return fmt.Errorf("read PeeringReport %s before writing its fencing report: %w", w.Node, err)
	case u == nil:
		return fmt.Errorf("read PeeringReport %s before writing its fencing report: the API returned no object", w.Node)
	}
	return w.WriteFencingAt(ctx, r, u.GetResourceVersion())
}

// WriteFencingAt applies r as the report's fencing field only if the
// report is still at resourceVersion version.
func (w APIReports) WriteFencingAt(ctx context.Context, r v1alpha1.FencingReport, version string) error {
	if version == "" {
		return fmt.Errorf("write the fencing report of PeeringReport %s: no resourceVersion to write it on", w.Node)
	}
	obj := w.object(r)
	obj.ResourceVersion = version
	if err := kube.ApplyReport(ctx, w.Client, obj, FieldManager); err != nil {
		return fmt.Errorf("write the fencing report of PeeringReport %s: %w", w.Node, err)
	}
	return nil
}

func (w APIReports) create(ctx context.Context, r v1alpha1.FencingReport) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w.object(r))
	if err != nil {
		return err
	}
	if _, err := w.Client.Resource(v1alpha1.PeeringReports).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("create PeeringReport %s with its fencing report: %w", w.Node, err)
	}
	return nil
}

func (w APIReports) object(r v1alpha1.FencingReport) *v1alpha1.PeeringReport {
	return &v1alpha1.PeeringReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PeeringReport"},
		ObjectMeta: metav1.ObjectMeta{Name: w.Node, Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound-agent"}},
		Fencing:    &r,
	}
}

// ReadFencing reads the report's fencing field with a GET that carries no
// resourceVersion (from etcd); nil when the report has none.
func (w APIReports) ReadFencing(ctx context.Context) (*v1alpha1.FencingReport, error) {
	u, err := w.Client.Resource(v1alpha1.PeeringReports).Get(ctx, w.Node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read back PeeringReport %s: %w", w.Node, err)
	}
	if u == nil {
		return nil, fmt.Errorf("read back PeeringReport %s: the API returned no object", w.Node)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	var obj v1alpha1.PeeringReport
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("read back PeeringReport %s: %w", w.Node, err)
	}
	return obj.Fencing, nil
}
