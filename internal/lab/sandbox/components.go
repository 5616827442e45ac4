package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
)

// progressf prints one progress line to w.
func progressf(w io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// startEtcd starts etcd on two free loopback ports and sets c.EtcdURL.
func (c *Cluster) startEtcd(ctx context.Context, opts Options, progress func(string, ...any)) error {
	dir := c.Dir
	var etcdURL string
	if err := c.run(ctx, opts, Etcd, opts.Binaries.Etcd, 2, 30*time.Second, func(ports []int) ([]string, func(context.Context) error) {
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		return []string{
			"--name=sandbox",
			"--data-dir=" + filepath.Join(dir, "etcd"),
			"--listen-client-urls=" + etcdURL,
			"--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=sandbox=" + peerURL,
			// A sandbox is thrown away after use: durability buys nothing and
			// fsync is the slowest part of etcd on a shared disk.
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		}, httpProbe(etcdURL+"/health", nil)
	}); err != nil {
		return err
	}
	c.EtcdURL = etcdURL
	progress("  etcd ready on %s", etcdURL)
	return nil
}

// startAPIServer starts kube-apiserver against c's etcd, writes one
// kubeconfig per sandbox identity and sets c's admin client. It returns
// the kubeconfig paths by identity.
func (c *Cluster) startAPIServer(ctx context.Context, opts Options, pk *pki, progress func(string, ...any)) (map[string]string, error) {
	dir := c.Dir
	etcdURL := c.EtcdURL
	tol := strconv.FormatInt(opts.Timings.DefaultTolerationSeconds, 10)
	issuer := "https://kubernetes.default.svc.cluster.local"
	adminTLS, err := tlsClient(pk.CACert, pk.client("admin"))
	if err != nil {
		return nil, err
	}
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, auditPolicyYAML, 0o644); err != nil {
		return nil, err
	}
	if err := c.run(ctx, opts, APIServer, opts.Binaries.APIServer, 1, 90*time.Second, func(ports []int) ([]string, func(context.Context) error) {
		apiPort := ports[0]
		c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
		return []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(apiPort),
			"--cert-dir=" + filepath.Join(dir, "pki", "apiserver-generated"),
			"--tls-cert-file=" + pk.ServingCert,
			"--tls-private-key-file=" + pk.ServingKey,
			"--client-ca-file=" + pk.CACert,
			"--service-account-key-file=" + pk.ServiceAccountPub,
			"--service-account-signing-key-file=" + pk.ServiceAccountKey,
			"--service-account-issuer=" + issuer,
			"--api-audiences=" + issuer,
			"--service-cluster-ip-range=10.96.0.0/16",
			"--authorization-mode=Node,RBAC",
			// There is no real kubernetes Service endpoint to keep: the
			// apiserver would otherwise advertise 127.0.0.1 to pods.
			"--endpoint-reconciler-type=none",
			"--requestheader-client-ca-file=" + pk.FrontProxyCACert,
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + pk.FrontProxyClientCert,
			"--proxy-client-key-file=" + pk.FrontProxyClientKey,
			"--default-not-ready-toleration-seconds=" + tol,
			"--default-unreachable-toleration-seconds=" + tol,
			"--allow-privileged=true",
			"--profiling=false",
			"--audit-policy-file=" + auditPolicy,
			"--audit-log-path=" + c.LogPath(AuditLog),
			"--audit-log-format=json",
		}, httpProbe(c.APIServerURL+"/readyz", adminTLS)
	}); err != nil {
		return nil, err
	}
	progress("  kube-apiserver ready on %s", c.APIServerURL)

	kubeconfigs := map[string]string{}
	for _, id := range sandboxIdentities {
		path := filepath.Join(dir, id.file+".kubeconfig")
		if err := writeKubeconfig(path, c.APIServerURL, pk.CACert, pk.client(id.file)); err != nil {
			return nil, fmt.Errorf("sandbox: write %s: %w", path, err)
		}
		kubeconfigs[id.file] = path
	}
	c.Kubeconfig = kubeconfigs["admin"]
	c.ReboundKubeconfig = kubeconfigs["rebound"]
	if c.Config, err = restConfig(c.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return kubeconfigs, nil
}

// startControllerManager starts kube-controller-manager with the real node
// lifecycle controller and the sandbox's timings.
func (c *Cluster) startControllerManager(ctx context.Context, opts Options, pk *pki, kubeconfigs map[string]string, progress func(string, ...any)) error {
	dir := c.Dir
	if err := c.run(ctx, opts, ControllerManager, opts.Binaries.ControllerManager, 1, 60*time.Second, func(ports []int) ([]string, func(context.Context) error) {
		kcmPort := ports[0]
		return []string{
			"--kubeconfig=" + kubeconfigs["controller-manager"],
			"--authentication-kubeconfig=" + kubeconfigs["controller-manager"],
			"--authorization-kubeconfig=" + kubeconfigs["controller-manager"],
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(kcmPort),
			"--cert-dir=" + filepath.Join(dir, "pki", "controller-manager-generated"),
			"--leader-elect=false",
			// Each controller acts as its own service account, with the
			// bootstrap RBAC roles, as kubeadm sets it up.
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + pk.ServiceAccountKey,
			"--root-ca-file=" + pk.CACert,
			"--cluster-signing-cert-file=" + pk.CACert,
			"--cluster-signing-key-file=" + pk.CAKey,
			"--allocate-node-cidrs=false",
			"--node-monitor-grace-period=" + opts.Timings.NodeMonitorGracePeriod.String(),
			"--node-monitor-period=" + opts.Timings.NodeMonitorPeriod.String(),
			"--profiling=false",
		}, httpProbe("https://127.0.0.1:"+strconv.Itoa(kcmPort)+"/healthz", insecureTLS())
	}); err != nil {
		return err
	}
	progress("  kube-controller-manager ready (node grace %s, monitor period %s)", opts.Timings.NodeMonitorGracePeriod, opts.Timings.NodeMonitorPeriod)
	return nil
}

// schedulerConfig is kube-scheduler's configuration. It scores every
// feasible node: by default a scheduler on more than 100 nodes stops
// looking after a share of them (42% at 1,000), so a pod's preference for
// some nodes (rebound-bench's rescued pods prefer the nodes that will die)
// is honoured for only some pods. API rates are raised for sandboxes of
// many nodes and pods (at the default 50 requests per second, binding
// 20,000 pods waits minutes on the client side); small ones never reach
// them.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 300
  burst: 600
leaderElection:
  leaderElect: false
enableProfiling: false
percentageOfNodesToScore: 100
`

// startScheduler starts kube-scheduler.
func (c *Cluster) startScheduler(ctx context.Context, opts Options, kubeconfigs map[string]string, progress func(string, ...any)) error {
	config := filepath.Join(c.Dir, "kube-scheduler.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, schedulerConfig, kubeconfigs["scheduler"]), 0o600); err != nil {
		return err
	}
	if err := c.run(ctx, opts, Scheduler, opts.Binaries.Scheduler, 1, 60*time.Second, func(ports []int) ([]string, func(context.Context) error) {
		schedPort := ports[0]
		return []string{
			"--config=" + config,
			"--authentication-kubeconfig=" + kubeconfigs["scheduler"],
			"--authorization-kubeconfig=" + kubeconfigs["scheduler"],
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(schedPort),
		}, httpProbe("https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", insecureTLS())
	}); err != nil {
		return err
	}
	progress("  kube-scheduler ready")
	return nil
}

// startKwok starts kwok, managing only the nodes whose heartbeat label is
// on, with the sandbox's stages.
func (c *Cluster) startKwok(ctx context.Context, opts Options, kubeconfigs map[string]string, progress func(string, ...any)) error {
	dir := c.Dir
	stagesPath := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesPath, kwokStages, 0o644); err != nil {
		return err
	}
	if err := c.run(ctx, opts, Kwok, opts.Binaries.Kwok, 1, 30*time.Second, func(ports []int) ([]string, func(context.Context) error) {
		kwokPort := ports[0]
		return []string{
			"--kubeconfig=" + kubeconfigs["kwok"],
			"--config=" + stagesPath,
			"--manage-all-nodes=false",
			"--manage-nodes-with-label-selector=" + HeartbeatLabel + "=" + heartbeatOn,
			"--node-lease-duration-seconds=" + strconv.Itoa(int(opts.Timings.NodeLeaseDuration/time.Second)),
			"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
			"--cidr=10.244.0.1/16",
		}, httpProbe("http://127.0.0.1:"+strconv.Itoa(kwokPort)+"/healthz", nil)
	}); err != nil {
		return err
	}
	progress("  kwok ready (node lease %s)", opts.Timings.NodeLeaseDuration)

	return nil
}
