// Package cli holds what every rebound command shares: the kubectl-style
// connection flags that turn into a rest.Config and the -o output flag
// (the logging flags are internal/logging's).
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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeFlags are kubectl's connection flags (--kubeconfig, --context, -n,
// --as, --token, --server, ...), read the way kubectl reads them: the
// flag, then $KUBECONFIG, then ~/.kube/config, then the in-cluster
// service account. They are client-go's own (clientcmd), not
// cli-runtime's, which would link kustomize into every binary, the
// in-cluster one included.
type KubeFlags struct {
	// KubeConfig is --kubeconfig; library callers may set it (and
	// Overrides.CurrentContext, --context) themselves.
	KubeConfig string
	Overrides  clientcmd.ConfigOverrides
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
	fs := cmd.Flags()
	fs.StringVar(&k.KubeConfig, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config, then the pod's service account)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	// Basic auth left Kubernetes in 1.19.
	names.AuthOverrideFlags.Username.LongName = ""
	names.AuthOverrideFlags.Password.LongName = ""
	if omit.Namespace {
		names.ContextOverrideFlags.Namespace.LongName = ""
	}
	if omit.Impersonation {
		names.AuthOverrideFlags.Impersonate.LongName = ""
		names.AuthOverrideFlags.ImpersonateUID.LongName = ""
		names.AuthOverrideFlags.ImpersonateGroups.LongName = ""
	}
	clientcmd.BindOverrideFlags(&k.Overrides, fs, names)
	return k
}

// NewKubeFlags returns the flags unbound, for library callers that set
// KubeConfig or the context themselves.
func NewKubeFlags() *KubeFlags { return &KubeFlags{} }

// loader is kubectl's: an explicit path, else $KUBECONFIG, else
// ~/.kube/config; the in-cluster config when none has anything.
func (k *KubeFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.KubeConfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.Overrides)
}

// RESTConfig is the one place every command turns its flags into a
// rest.Config. userAgent names the command in the API server's audit log.
// The error says what was missing and how to fix it, without a library's
// nested wording.
func (k *KubeFlags) RESTConfig(userAgent string) (*rest.Config, error) {
	loader := k.loader()
	// kubectl falls back to http://localhost:8080 when it finds no
	// kubeconfig and is not in a pod; rebound says so instead.
	if raw, err := loader.RawConfig(); err == nil && len(raw.Contexts) == 0 && len(raw.Clusters) == 0 && k.Overrides.ClusterInfo.Server == "" {
		if _, err := rest.InClusterConfig(); err != nil {
			return nil, ConnectionError(clientcmd.ErrEmptyConfig)
		}
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, ConnectionError(err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Namespace is -n's value, else def. The kubeconfig context's namespace
// is not used: rebound's namespace (the Lease, the stop switch, the peer
// set) must not change with the context a user happens to be in.
func (k *KubeFlags) Namespace(def string) string {
	if ns := k.Overrides.Context.Namespace; ns != "" {
		return ns
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
