package diagnose

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"rebound/api/v1alpha1"
	"rebound/pkg/exitcode"
	"rebound/pkg/zone"
)

func fakeClients(objs ...runtime.Object) (*fake.Clientset, *dynamicfake.FakeDynamicClient, Clients) {
	kube := fake.NewClientset(objs...)
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rebound.dev/v1alpha1", "kind": "RecoveryPolicy",
		"metadata": map[string]any{"name": "default"},
		"spec": map[string]any{
			"critical":           map[string]any{"namespaces": []any{"kube-system"}},
			"maxUnavailableTime": "45s",
		},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{RecoveryPolicies: "RecoveryPolicyList", v1alpha1.PeeringReports: "PeeringReportList"}, policy)
	return kube, dyn, Clients{Kube: kube, Dynamic: dyn, Host: "https://api.example:6443", Timeout: time.Second}
}

// TestGatherReadsOnly: Gather lists every resource Explain needs, reads
// the RecoveryPolicies with their durations, and never does anything but
// list.
func TestGatherReadsOnly(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", Labels: map[string]string{"a": "b"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "p"}}
	kube, dyn, c := fakeClients(node, ns, pod)
	s, x, err := Gather(context.Background(), c, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Nodes) != 1 || len(s.Pods) != 1 || s.Namespaces["kube-system"]["a"] != "b" || !s.Now.Equal(t0) {
		t.Errorf("snapshot = %+v", s)
	}
	if len(s.Policies) != 1 || s.Policies[0].Spec.MaxUnavailableTime.Duration != 45*time.Second || x.BuiltInPolicy {
		t.Errorf("policies = %+v, builtIn %v", s.Policies, x.BuiltInPolicy)
	}
	resources := map[string]bool{}
	for _, a := range append(kube.Actions(), dyn.Actions()...) {
		if a.GetVerb() != "list" {
			t.Errorf("Gather did %s %s: it may only list", a.GetVerb(), a.GetResource().Resource)
		}
		resources[a.GetResource().Resource] = true
	}
	for _, r := range []string{"nodes", "pods", "namespaces", "persistentvolumeclaims", "replicasets", "deployments", "statefulsets", "daemonsets", "recoverypolicies", "leases", "events"} {
		if !resources[r] {
			t.Errorf("Gather did not list %s", r)
		}
	}
}

func TestGatherWithoutCRDUsesTheDefaultPolicy(t *testing.T) {
	_, dyn, c := fakeClients()
	dyn.PrependReactor("list", "recoverypolicies", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "rebound.dev", Resource: "recoverypolicies"}, "")
	})
	s, x, err := Gather(context.Background(), c, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !x.BuiltInPolicy || len(s.Policies) != 1 || s.Policies[0].Name != "default" || len(x.Warnings) != 1 ||
		!strings.Contains(x.Warnings[0], "CRD (recoverypolicies.rebound.dev) is not installed") {
		t.Errorf("policies %+v, extra %+v", s.Policies, x)
	}
	r := Explain(s, x)
	if len(r.Policies) != 1 || r.Policies[0].Source != "built-in" {
		t.Errorf("report policies = %+v", r.Policies)
	}
}

// TestGatherWithoutEvents: without the right to list Events, who deleted a
// pod rests on status.lastActions, and a warning says so; diagnose still
// runs.
func TestGatherWithoutEvents(t *testing.T) {
	kube, _, c := fakeClients()
	kube.PrependReactor("list", "events", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", fmt.Errorf("no"))
	})
	_, x, err := Gather(context.Background(), c, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Warnings) != 1 || !strings.Contains(x.Warnings[0], "cannot list Events: who deleted a pod is read from the RecoveryPolicies' status.lastActions alone") {
		t.Errorf("warnings = %q", x.Warnings)
	}
}

func TestGatherForbiddenIsOneLine(t *testing.T) {
	cases := []struct{ resource, group, want string }{
		{"pods", "", `not allowed to list pods cluster-wide as user "alice": grant the rebound-diagnose ClusterRole (deploy/rbac)`},
		{"daemonsets", "apps", `not allowed to list daemonsets cluster-wide as user "alice": grant the rebound-diagnose ClusterRole (deploy/rbac)`},
		{"recoverypolicies", "rebound.dev", `not allowed to list recoverypolicies.rebound.dev cluster-wide as user "alice": grant the rebound-diagnose ClusterRole (deploy/rbac)`},
	}
	for _, tc := range cases {
		t.Run(tc.resource, func(t *testing.T) {
			kube, dyn, c := fakeClients()
			deny := func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: tc.group, Resource: tc.resource}, "",
					fmt.Errorf(`User "alice" cannot list resource %q in API group %q at the cluster scope`, tc.resource, tc.group))
			}
			kube.PrependReactor("list", tc.resource, deny)
			dyn.PrependReactor("list", tc.resource, deny)
			_, _, err := Gather(context.Background(), c, t0)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error = %v, want %q", err, tc.want)
			}
			if exitcode.Of(err, exitcode.Failed) != ExitCannotRead {
				t.Errorf("exit code %d, want %d", exitcode.Of(err, exitcode.Failed), ExitCannotRead)
			}
		})
	}
}

// TestRunCannotRead runs the real client against API servers that fail:
// each failure is one line that says which, and exit code 2.
func TestRunCannotRead(t *testing.T) {
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "https://" + addr
	}()
	unauthorized := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
	}))
	defer unauthorized.Close()
	release := make(chan struct{})
	slow := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer slow.Close()
	defer close(release)
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the rejected handshake
	untrusted.StartTLS()
	defer untrusted.Close()

	insecure := rest.TLSClientConfig{Insecure: true}
	cases := []struct {
		name string
		cfg  *rest.Config
		want string
	}{
		{"connection refused", &rest.Config{Host: closed, TLSClientConfig: insecure},
			"cannot reach the Kubernetes API at " + closed + ": connection refused"},
		{"credentials rejected", &rest.Config{Host: unauthorized.URL, TLSClientConfig: insecure},
			"the Kubernetes API at " + unauthorized.URL + " rejected the credentials (401 Unauthorized): check the kubeconfig's user, token or client certificate"},
		{"no answer", &rest.Config{Host: slow.URL, TLSClientConfig: insecure},
			"cannot reach the Kubernetes API at " + slow.URL + ": no answer within 300ms (--timeout)"},
		{"unknown CA", &rest.Config{Host: untrusted.URL},
			"cannot reach the Kubernetes API at " + untrusted.URL + ": TLS: x509: certificate signed by unknown authority"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, code, err := Run(context.Background(), Options{Config: tc.cfg, Timeout: 300 * time.Millisecond})
			if code != ExitCannotRead || err == nil {
				t.Fatalf("code %d, error %v; want %d and an error", code, err, ExitCannotRead)
			}
			if strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error = %q, want one line starting %q", err, tc.want)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %s to fail", d)
			}
		})
	}
}

func TestRunRejectsBadConfiguration(t *testing.T) {
	_, code, err := Run(context.Background(), Options{})
	if code != ExitCannotRead || err == nil || !strings.Contains(err.Error(), "no Kubernetes API to talk to") {
		t.Errorf("code %d, error %v", code, err)
	}
	zc := zone.DefaultConfig()
	zc.UnhealthyZoneThreshold = -1
	_, code, err = Run(context.Background(), Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, ZoneConfig: zc})
	if code != ExitCannotRead || err == nil || !strings.Contains(err.Error(), "--unhealthy-zone-threshold") {
		t.Errorf("code %d, error %v", code, err)
	}
}
