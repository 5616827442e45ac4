// Package cli holds what every rebound command shares: the kubectl-style
// connection flags that turn into a rest.Config, the logging flags that
// route slog, logr (controller-runtime) and klog (client-go, leader
// election) to one structured logger, and the -o output flag.
//
// The commands of the in-cluster binary (controller, agent) live in
// subpackages, so that rebound (the operator CLI) and rebound-manager (the
// image's binary) run one implementation.
package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeFlags are kubectl's connection flags (--kubeconfig, --context, -n,
// --as, --token, --server, ...), read the way kubectl reads them: the
// flag, then $KUBECONFIG, then ~/.kube/config, then the in-cluster
// service account.
type KubeFlags struct {
	*genericclioptions.ConfigFlags
}

// Omit names kubectl flags a command leaves out.
type Omit struct {
	// Namespace: the command has no use for one, so -n does not pretend
	// to do something.
	Namespace bool
	// Impersonation (--as, --as-group, --as-uid): the agent's --as is
	// BGP's AS number, as in BIRD's "local as" and Calico's asNumber.
	Impersonation bool
}

// AddKubeFlags registers the connection flags on cmd.
func AddKubeFlags(cmd *cobra.Command, omit Omit) *KubeFlags {
	k := NewKubeFlags()
	if omit.Namespace {
		k.ConfigFlags.Namespace = nil
	}
	if omit.Impersonation {
		k.Impersonate, k.ImpersonateGroup, k.ImpersonateUID = nil, nil, nil
	}
	k.AddFlags(cmd.Flags())
	return k
}

// NewKubeFlags returns the flags unbound, for library callers that set
// KubeConfig or Context themselves.
func NewKubeFlags() *KubeFlags {
	cf := genericclioptions.NewConfigFlags(true)
	// Basic auth left Kubernetes in 1.19; the cache dir is for
	// discovery, which rebound does not cache on disk.
	cf.Username, cf.Password, cf.CacheDir = nil, nil, nil
	return &KubeFlags{ConfigFlags: cf}
}

// RESTConfig is the one place every command turns its flags into a
// rest.Config. userAgent names the command in the API server's audit log.
// The error says what was missing and how to fix it, without a library's
// nested wording.
func (k *KubeFlags) RESTConfig(userAgent string) (*rest.Config, error) {
	// kubectl falls back to http://localhost:8080 when it finds no
	// kubeconfig and is not in a pod; rebound says so instead.
	if raw, err := k.ToRawKubeConfigLoader().RawConfig(); err == nil && len(raw.Contexts) == 0 && len(raw.Clusters) == 0 &&
		(k.APIServer == nil || *k.APIServer == "") {
		if _, err := rest.InClusterConfig(); err != nil {
			return nil, ConnectionError(clientcmd.ErrEmptyConfig)
		}
	}
	cfg, err := k.ToRESTConfig()
	if err != nil {
		return nil, ConnectionError(err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Namespace is the namespace of -n, else of the kubeconfig's context, else
// (in a pod) the pod's own; def when none says.
func (k *KubeFlags) Namespace(def string) string {
	if k.ConfigFlags.Namespace != nil && *k.ConfigFlags.Namespace != "" {
		return *k.ConfigFlags.Namespace
	}
	return def
}

// ConnectionError explains why no API server could be chosen.
func ConnectionError(err error) error {
	switch {
	case clientcmd.IsEmptyConfig(err), errors.Is(err, rest.ErrNotInCluster):
		return fmt.Errorf("no Kubernetes API to talk to: no kubeconfig found and not running in a pod (pass --kubeconfig FILE, set KUBECONFIG, or create ~/.kube/config)")
	case os.IsNotExist(err):
		return fmt.Errorf("no Kubernetes API to talk to: %w (check --kubeconfig or KUBECONFIG)", err)
	}
	return fmt.Errorf("no Kubernetes API to talk to: %w (check --kubeconfig, KUBECONFIG and --context)", err)
}
