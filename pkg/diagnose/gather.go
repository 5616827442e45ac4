package diagnose

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"rebound/api/v1alpha1"
	"rebound/pkg/exitcode"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
	"rebound/pkg/peering/kube"
	"rebound/pkg/policyfile"
	"rebound/pkg/rescue"
)

// Clients are what Gather reads with. Gather only ever calls List, and
// Get for the one object it reads by name (the fencing document, whose
// Role grants get on it alone).
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Host is the API server's URL, for messages.
	Host string
	// Timeout is the per-request timeout, for messages.
	Timeout time.Duration
	// Evidence says which agents' reports count in the verdicts, as the
	// controller's --peering-report-max-age and --peering-max-clock-skew
	// do; zero fields are the defaults.
	Evidence liveness.Options
}

// RecoveryPolicies is the RecoveryPolicy resource.
var RecoveryPolicies = schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "recoverypolicies"}

// pageSize bounds each List response; large clusters are read in pages.
const pageSize = 500

// Gather lists, cluster-wide and read-only, everything Explain reads:
// nodes, pods, namespaces, PVCs, ReplicaSets, Deployments, StatefulSets,
// DaemonSets, RecoveryPolicies, the agents' PeeringReports, the nodes'
// Leases and rebound's delete Events. Without the RecoveryPolicy CRD it uses
// the default policy deploy/ ships (policyfile.Default) and says so in
// Extra. Any other failure is an *Error whose
// one-line message says what is wrong (API unreachable, credentials
// rejected, a list not allowed) and what to do.
func Gather(ctx context.Context, c Clients, now time.Time) (rescue.Snapshot, Extra, error) {
	s := rescue.Sources{Now: now, Namespaces: map[string]map[string]string{}}
	var x Extra
	fail := func(err error) (rescue.Snapshot, Extra, error) { return rescue.Snapshot{}, x, err }
	core, apps := c.Kube.CoreV1(), c.Kube.AppsV1()
	var err error

	if s.Nodes, err = listAll(ctx, c, "nodes", core.Nodes().List, func(l *corev1.NodeList) ([]corev1.Node, string) { return l.Items, l.Continue }); err != nil {
		return fail(err)
	}
	if s.Pods, err = listAll(ctx, c, "pods", core.Pods("").List, func(l *corev1.PodList) ([]corev1.Pod, string) { return l.Items, l.Continue }); err != nil {
		return fail(err)
	}
	namespaces, err := listAll(ctx, c, "namespaces", core.Namespaces().List, func(l *corev1.NamespaceList) ([]corev1.Namespace, string) { return l.Items, l.Continue })
	if err != nil {
		return fail(err)
	}
	for _, ns := range namespaces {
		s.Namespaces[ns.Name] = ns.Labels
	}
	if s.PVCs, err = listAll(ctx, c, "persistentvolumeclaims", core.PersistentVolumeClaims("").List, func(l *corev1.PersistentVolumeClaimList) ([]corev1.PersistentVolumeClaim, string) {
		return l.Items, l.Continue
	}); err != nil {
		return fail(err)
	}
	if s.ReplicaSets, err = listAll(ctx, c, "replicasets", apps.ReplicaSets("").List, func(l *appsv1.ReplicaSetList) ([]appsv1.ReplicaSet, string) { return l.Items, l.Continue }); err != nil {
		return fail(err)
	}
	if s.Deployments, err = listAll(ctx, c, "deployments", apps.Deployments("").List, func(l *appsv1.DeploymentList) ([]appsv1.Deployment, string) { return l.Items, l.Continue }); err != nil {
		return fail(err)
	}
	if x.StatefulSets, err = listAll(ctx, c, "statefulsets", apps.StatefulSets("").List, func(l *appsv1.StatefulSetList) ([]appsv1.StatefulSet, string) { return l.Items, l.Continue }); err != nil {
		return fail(err)
	}
	if x.DaemonSets, err = listAll(ctx, c, "daemonsets", apps.DaemonSets("").List, func(l *appsv1.DaemonSetList) ([]appsv1.DaemonSet, string) { return l.Items, l.Continue }); err != nil {
		return fail(err)
	}

	if err := gatherPeering(ctx, c, &x); err != nil {
		return fail(err)
	}
	// The Lease plane, taken as the kubelets wrote it.
	nodeLeases, err := c.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		x.Warnings = append(x.Warnings, "cannot list the Leases in kube-node-lease: verdicts without the Lease plane (grant rebound-diagnose from deploy/rbac)")
	case err != nil:
		return fail(describe(c, "leases", err))
	default:
		s.Liveness.Leases = kube.LeasesAsWritten(nodeLeases.Items)
		x.Leases = s.Liveness.Leases
		// Policies with detection TwoPlanes are planned on them too.
		s.Liveness.LeaseRenewTimes = kube.LeaseRenewTimes(nodeLeases.Items)
	}

	eventsForbidden, err := gatherDeleteEvents(ctx, c, &x)
	if err != nil {
		return fail(err)
	}
	if fencingInView(s.Nodes, x.FencingReports) {
		if err := gatherFencing(ctx, c, &x, eventsForbidden); err != nil {
			return fail(err)
		}
	}

	s.Policies, err = listPolicies(ctx, c)
	switch {
	case apierrors.IsNotFound(err):
		def := policyfile.Default()
		s.Policies = []*v1alpha1.RecoveryPolicy{def}
		x.BuiltInPolicy = true
		x.Warnings = append(x.Warnings, fmt.Sprintf("the RecoveryPolicy CRD (recoverypolicies.rebound.dev) is not installed: diagnose assumes the built-in default policy (%s, maxUnavailableTime %s)",
			def.Spec.Critical.Describe(), def.Spec.EffectiveMaxUnavailableTime()))
	case err != nil:
		return fail(describe(c, "recoverypolicies.rebound.dev", err))
	}
	// The verdicts from the same model, built the same way, as the
	// controller's planners read. diagnose has no observation history, so
	// its clocks are the API's (transitions, Lease renew times), and each
	// verdict's reason says so.
	s.Liveness.Reports = x.PeeringReports
	s.Liveness.Options = c.Evidence
	snap, _ := rescue.Build(s)
	return snap, x, nil
}

// listAll lists one resource in pages and returns pointers into the items.
func listAll[L any, T any](ctx context.Context, c Clients, what string,
	list func(context.Context, metav1.ListOptions) (*L, error), items func(*L) ([]T, string),
) ([]*T, error) {
	var out []*T
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		l, err := list(ctx, opts)
		if err != nil {
			return nil, describe(c, what, err)
		}
		page, next := items(l)
		for i := range page {
			out = append(out, &page[i])
		}
		if next == "" {
			return out, nil
		}
		opts.Continue = next
	}
}

// gatherPeering lists the agents' PeeringReports and the published peer
// set (ConfigMap rebound-system/rebound-peer-set, listed by name). Without
// the CRD or the ConfigMap, or without the right to read them, diagnose
// explains BGP from the node labels alone and says so.
func gatherPeering(ctx context.Context, c Clients, x *Extra) error {
	objs, skipped, err := kube.ListReportObjects(ctx, c.Dynamic, pageSize)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		x.Warnings = append(x.Warnings, fmt.Sprintf("cannot list peeringreports.rebound.dev (%s): BGP sessions unknown", apierrors.ReasonForError(err)))
	case err != nil:
		return describe(c, "peeringreports.rebound.dev", err)
	}
	for i := range objs {
		// The fencing block is kept even when the rest of the report is
		// unreadable: the agent's watchdog state does not depend on it.
		if f := objs[i].Fencing; f != nil {
			if x.FencingReports == nil {
				x.FencingReports = map[string]*v1alpha1.FencingReport{}
			}
			x.FencingReports[objs[i].Name] = f
		}
		r, err := kube.ReportFromAPI(&objs[i])
		if err != nil {
			skipped = append(skipped, fmt.Errorf("PeeringReport %s unreadable: %w", objs[i].Name, err))
			continue
		}
		x.PeeringReports = append(x.PeeringReports, r)
	}
	for _, e := range skipped {
		x.Warnings = append(x.Warnings, e.Error())
	}
	cms, err := c.Kube.CoreV1().ConfigMaps(peering.DefaultPeerSetNamespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + peering.DefaultPeerSetName})
	switch {
	case apierrors.IsForbidden(err):
		x.Warnings = append(x.Warnings, fmt.Sprintf("cannot read the published peer set %s/%s: grant the rebound-diagnose-peering Role (deploy/rbac)", peering.DefaultPeerSetNamespace, peering.DefaultPeerSetName))
	case err != nil && !apierrors.IsNotFound(err):
		return describe(c, "configmaps", err)
	case err == nil && len(cms.Items) == 1:
		if group, ok := cms.Items[0].Annotations[calico.AnnotationAPIGroup]; ok {
			x.Calico = &BGPCalico{APIGroup: group, Reason: cms.Items[0].Annotations[calico.AnnotationAPIGroupReason]}
		}
		set, perr := kube.PeerSetFromConfigMap(&cms.Items[0])
		if perr != nil {
			x.Warnings = append(x.Warnings, perr.Error())
		} else {
			x.PeerSet = &set
		}
	}
	return nil
}

// gatherDeleteEvents reads the Events rebound records for its deletes
// (StrandedPodDeleted, StrandedPodForceDeleted: each names the pod, with
// its UID, as its regarding or related object), listed by reason. Without
// the right to list Events, who deleted a pod is read from the policies'
// status.lastActions alone, and a warning says so.
// It reports whether listing Events was forbidden.
func gatherDeleteEvents(ctx context.Context, c Clients, x *Extra) (forbidden bool, err error) {
	for _, reason := range []string{rescue.ActionDelete.EventReason(), rescue.ActionForceDelete.EventReason()} {
		opts := metav1.ListOptions{Limit: pageSize, FieldSelector: "reason=" + reason}
		for {
			l, err := c.Kube.CoreV1().Events("").List(ctx, opts)
			switch {
			case apierrors.IsForbidden(err):
				x.Warnings = append(x.Warnings, "cannot list Events: who deleted a pod is read from the RecoveryPolicies' status.lastActions alone (grant the rebound-diagnose ClusterRole from deploy/rbac)")
				return true, nil
			case err != nil:
				return false, describe(c, "events", err)
			}
			for i := range l.Items {
				if r, ok := deleteRecord(&l.Items[i], reason); ok {
					x.DeleteRecords = append(x.DeleteRecords, r)
				}
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
	}
	return false, nil
}

// deleteRecord reads one of rebound's delete Events, of the reason
// listed: the pod is its related object, or its regarding object when
// that is the pod.
func deleteRecord(ev *corev1.Event, reason string) (rescue.DeleteRecord, bool) {
	ref := ev.Related
	if ref == nil || ref.Kind != "Pod" {
		ref = &ev.InvolvedObject
	}
	if ref.Kind != "Pod" || ref.Name == "" || ev.Type != corev1.EventTypeNormal || ev.Reason != reason {
		return rescue.DeleteRecord{}, false
	}
	ns := ref.Namespace
	if ns == "" {
		ns = ev.Namespace
	}
	at := ev.EventTime.Time
	for _, t := range []time.Time{ev.LastTimestamp.Time, ev.FirstTimestamp.Time, ev.CreationTimestamp.Time} {
		if at.IsZero() {
			at = t
		}
	}
	source := "Event " + ev.Reason
	if by := cmp.Or(ev.ReportingController, ev.Source.Component); by != "" {
		source += " from " + by
	}
	return rescue.DeleteRecord{Namespace: ns, Pod: ref.Name, UID: ref.UID, At: at, Source: source}, true
}

// listPolicies lists RecoveryPolicies through the dynamic client, so that a
// missing CRD is a plain NotFound.
func listPolicies(ctx context.Context, c Clients) ([]*v1alpha1.RecoveryPolicy, error) {
	var out []*v1alpha1.RecoveryPolicy
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		l, err := c.Dynamic.Resource(RecoveryPolicies).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			data, err := json.Marshal(l.Items[i].Object)
			if err != nil {
				return nil, err
			}
			var p v1alpha1.RecoveryPolicy
			if err := json.Unmarshal(data, &p); err != nil {
				return nil, fmt.Errorf("RecoveryPolicy %s: %w", l.Items[i].GetName(), err)
			}
			out = append(out, &p)
		}
		if l.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = l.GetContinue()
	}
}

// forbiddenUser finds the user name in an RBAC denial.
var forbiddenUser = regexp.MustCompile(`User "([^"]*)"`)

// describe turns a failed List into an *Error with a one-line message.
func describe(c Clients, what string, err error) error {
	var msg string
	switch {
	case apierrors.IsForbidden(err):
		who := ""
		if m := forbiddenUser.FindStringSubmatch(err.Error()); m != nil {
			who = fmt.Sprintf(" as user %q", m[1])
		}
		msg = fmt.Sprintf("not allowed to list %s cluster-wide%s: grant the rebound-diagnose ClusterRole (deploy/rbac)", what, who)
	case apierrors.IsUnauthorized(err):
		msg = fmt.Sprintf("the Kubernetes API at %s rejected the credentials (401 Unauthorized): check the kubeconfig's user, token or client certificate", c.Host)
	default:
		if why := noAnswer(err, c.Timeout); why != "" {
			msg = fmt.Sprintf("cannot reach the Kubernetes API at %s: %s", c.Host, why)
		} else {
			msg = fmt.Sprintf("cannot list %s from the Kubernetes API at %s: %s", what, c.Host, oneLine(err.Error()))
		}
	}
	return &Error{Code: ExitCannotRead, Msg: msg, Err: err}
}

// noAnswer says why a request never got an answer from an API server,
// or "" when the server did answer.
func noAnswer(err error, timeout time.Duration) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) {
		return ""
	}
	var errno syscall.Errno
	var dns *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot resolve %s: %s", dns.Name, dns.Err)
	case errors.As(err, &errno):
		return errno.Error()
	case errors.As(err, &verify):
		return "TLS: " + oneLine(verify.Err.Error())
	case errors.As(err, &unknownCA):
		return "TLS: " + unknownCA.Error()
	case errors.As(err, &hostname):
		return "TLS: " + hostname.Error()
	case errors.As(err, &invalid):
		return "TLS: " + invalid.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout(), apierrors.IsTimeout(err):
		if timeout > 0 {
			return fmt.Sprintf("no answer within %s (--timeout)", timeout)
		}
		return "no answer (timeout)"
	case errors.As(err, &netErr):
		return oneLine(netErr.Error())
	}
	return ""
}

// Error is a failure that ends diagnose with an exit code other than 0:
// the message is one line that says what was wrong and what to do.
type Error = exitcode.Error
