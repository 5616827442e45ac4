package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/internal/lab/sandbox"
)

// TestMetricsRequireAuth: the controller and the node agent, installed
// from the chart and each run with its own ServiceAccount's token, serve
// /metrics over HTTPS only to a caller whose token the API server
// authenticates and whose RBAC allows "get /metrics" (ClusterRole
// rebound-metrics-reader): anonymous is 401, a bad token is refused, an
// authenticated ServiceAccount without the role is 403. The agent's probe
// port (plain HTTP, for the kubelet) serves no metrics.
func TestMetricsRequireAuth(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	cl := newClient(t, c)
	installChart(ctx, t, cl, map[string]any{
		"namespace": map[string]any{"create": true},
		"agent":     map[string]any{"enabled": true},
	})

	controllerAddr, agentAddr, probeAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--metrics-bind-address", controllerAddr)
	dir := t.TempDir()
	agentProcess(t, c, "metrics-"+c.NodeNames[0],
		"--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-agent", "rebound-agent"),
		"--node-name", c.NodeNames[0], "--as", "64512",
		"--mesh-file", filepath.Join(dir, "mesh.conf"), "--bird-socket", filepath.Join(dir, "bird.ctl"),
		"--health-addr", probeAddr, "--metrics-bind-address", agentAddr)

	// Two scrapers: one bound to rebound-metrics-reader, one not.
	for _, sa := range []string{"scraper", "stranger"} {
		if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rebound-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}); err != nil {
		t.Fatal(err)
	}
	scraper := serviceAccountToken(ctx, t, c, "default", "scraper")
	stranger := serviceAccountToken(ctx, t, c, "default", "stranger")

	for _, target := range []struct{ name, addr, series string }{
		{"controller", controllerAddr, "rebound_plan_duration_seconds"},
		{"agent", agentAddr, "rebound_agent_reloads_total"},
	} {
		t.Run(target.name, func(t *testing.T) {
			url := "https://" + target.addr + "/metrics"
			poll(ctx, t, time.Minute, "metrics endpoint up", func() (bool, string) {
				code, _, err := scrapeMetrics(ctx, url, "")
				return err == nil, fmt.Sprint(code, err)
			})
			if code, body, _ := scrapeMetrics(ctx, url, ""); code != http.StatusUnauthorized {
				t.Errorf("anonymous scrape: %d %.200s, want 401", code, body)
			}
			// controller-runtime's filter answers 500 when the authenticator
			// errs (a token the API server rejects), 401 when there is none.
			if code, body, _ := scrapeMetrics(ctx, url, "not-a-token"); (code != http.StatusUnauthorized && code != http.StatusInternalServerError) || strings.Contains(body, "rebound_") {
				t.Errorf("scrape with a bad token: %d %.200s, want it refused (401 or 500) without metrics", code, body)
			}
			if code, body, _ := scrapeMetrics(ctx, url, stranger); code != http.StatusForbidden {
				t.Errorf("scrape by a ServiceAccount without rebound-metrics-reader: %d %.200s, want 403", code, body)
			}
			// The RBAC cache of a fresh binding may lag a moment.
			poll(ctx, t, 30*time.Second, "authorized scrape", func() (bool, string) {
				code, body, err := scrapeMetrics(ctx, url, scraper)
				return code == http.StatusOK && strings.Contains(body, target.series), fmt.Sprintf("%d %v %.200s", code, err, body)
			})
		})
	}
	// The agent's probe port answers the kubelet without a token, and has
	// no metrics to give away.
	poll(ctx, t, 30*time.Second, "agent probe port up", func() (bool, string) {
		code, body, err := httpGet(ctx, "http://"+probeAddr+"/healthz")
		return code == http.StatusOK, fmt.Sprintf("%d %v %.200s", code, err, body)
	})
	if code, body, _ := httpGet(ctx, "http://"+probeAddr+"/metrics"); code != http.StatusNotFound || strings.Contains(body, "rebound_") {
		t.Errorf("GET /metrics on the agent's probe port: %d %.200s, want 404", code, body)
	}
}

// httpGet GETs url over plain HTTP.
func httpGet(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// scrapeMetrics GETs url with the bearer token (none when empty). The
// controller's certificate is self-signed: the test checks authentication
// and authorization, not the certificate.
func scrapeMetrics(ctx context.Context, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed by design
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
