package agent

// Rejoin: the fail-open half of the Calico contract that needs no
// controller (rebound agent --rejoin-only, the DaemonSet of deploy/calico).
//
// Calico's BGPPeer selects every node not labelled
// peering.rebound.dev/in-set=false (pkg/peering/calico.InSetSelector), so a
// node the controller never labelled is in the mesh without it. What the
// controller alone could undo is its own "false": a node left out while it
// was dead, that returns Ready while the controller is down, would stay out
// of the mesh, blackholed, until the controller came back. The rejoiner on
// that node watches its own Node and, as soon as the Node is Ready with a
// BGP address and still labelled "false", puts it back ("true"). That is
// exactly what the controller's planner does for a Ready node (a Ready node
// with an address is always in the set), so the two never disagree.
//
// Least privilege: the rejoiner's credential may patch only the Node its
// token is bound to, only from "false" to "true" (or removed), only while
// that Node is Ready as stored, and nothing else about it
// (deploy/calico/rejoin-admission.yaml): it can put its own node back,
// never take any node out. The patch itself carries a JSON-patch test of
// the old value, so a label that changed since the watch event (the
// controller was quicker) is never overwritten.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// RejoinFieldManager owns the label in the Node's managedFields after a
// rejoin: `kubectl get node -o yaml --show-managed-fields` shows who put it
// back, and when.
const RejoinFieldManager = "rebound-rejoin"

// RejoinNeeded says whether this node must be put back into the Calico
// set now, and why (or why not), for the log.
func RejoinNeeded(n *corev1.Node) (bool, string) {
	v, labelled := n.Labels[peering.LabelInSet]
	switch {
	case !labelled || v != "false":
		return false, fmt.Sprintf("label %s is %q: in the set", peering.LabelInSet, v)
	case !kubestatus.NodeReady(n):
		return false, "NotReady: the controller's decision to leave it out stands"
	case !kube.BGPAddress(n).IsValid():
		// The planner leaves a node without an address out whatever its
		// health: putting it back would only fight the controller.
		return false, "no BGP address: nothing to peer with"
	}
	return true, fmt.Sprintf("Ready with a BGP address but labelled %s=false", peering.LabelInSet)
}

// rejoinPatch turns "false" into "true", and fails (422) if the label is
// no longer "false" when the API server applies it.
var rejoinPatch = func() []byte {
	path := "/metadata/labels/" + strings.ReplaceAll(strings.ReplaceAll(peering.LabelInSet, "~", "~0"), "/", "~1")
	return fmt.Appendf(nil, `[{"op":"test","path":%q,"value":"false"},{"op":"replace","path":%q,"value":"true"}]`, path, path)
}()

// Rejoiner puts its own node back into the Calico set (see above).
type Rejoiner struct {
	node   string
	client kubernetes.Interface
	log    *slog.Logger
	clock  clock.WithTicker
	// First and longest wait before retrying a failed patch.
	retry, maxRetry time.Duration

	trigger chan struct{}

	// patchedFrom is the resourceVersion of the Node the last successful
	// patch was based on: until the watch brings the patched object, the
	// cache still shows that one, and it must not be patched again.
	patchedFrom string

	mu      sync.Mutex
	synced  bool
	rejoins int
	lastErr string
}

// NewRejoiner builds the rejoiner of opts.NodeName from the agent's
// options (Client, Clock, Logger, RetryInterval, MaxRetryInterval).
func NewRejoiner(opts Options) *Rejoiner {
	opts = opts.WithDefaults()
	return &Rejoiner{
		node: opts.NodeName, client: opts.Client, log: opts.Logger.With("node", opts.NodeName, "part", "rejoin"), clock: opts.Clock,
		retry: opts.RetryInterval, maxRetry: opts.MaxRetryInterval,
		trigger: make(chan struct{}, 1),
	}
}

// Rejoins is how many times this rejoiner put its node back.
func (r *Rejoiner) Rejoins() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejoins
}

// LastError is the last failed patch's error, "" after a success.
func (r *Rejoiner) LastError() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Run watches this node's Node object until ctx ends. It returns nil when
// ctx ends, and an error only when the watch cannot start.
func (r *Rejoiner) Run(ctx context.Context) error {
	// One object: a field selector on the name (RBAC cannot narrow list
	// and watch to the node the token is bound to; reading is harmless).
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", r.node).String()
		}))
	inf := factory.Core().V1().Nodes()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.kick() },
		UpdateFunc: func(any, any) { r.kick() },
	}); err != nil {
		return err
	}
	lister := inf.Lister()
	ictx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ictx.Done())
	for typ, ok := range factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("rebound agent: cache of %v did not sync", typ)
		}
	}
	r.mu.Lock()
	r.synced = true
	r.mu.Unlock()
	r.log.Info("watching this node to put it back into the Calico peer set when it is Ready", "label", peering.LabelInSet)

	var retry clock.Timer
	delay := time.Duration(0)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.trigger:
		case <-retryC:
			retry = nil
		}
		n, err := lister.Get(r.node)
		if err != nil {
			continue // not there (yet): the next event says
		}
		if err := r.reconcile(ctx, n); err != nil {
			delay = min(max(2*delay, r.retry), r.maxRetry)
			if retry != nil {
				retry.Stop()
			}
			retry = r.clock.NewTimer(delay)
			r.log.Error("cannot put this node back into the peer set", "error", err, "retryIn", delay)
			continue
		}
		delay = 0
	}
}

// reconcile patches the node when RejoinNeeded says so. A label that
// changed under it is not an error: the watch brings the new state.
func (r *Rejoiner) reconcile(ctx context.Context, n *corev1.Node) error {
	need, why := RejoinNeeded(n)
	if !need {
		r.log.Debug("nothing to do", "why", why)
		return nil
	}
	if n.ResourceVersion != "" && n.ResourceVersion == r.patchedFrom {
		return nil // our own patch, not in the cache yet
	}
	_, err := r.client.CoreV1().Nodes().Patch(ctx, r.node, types.JSONPatchType, rejoinPatch, metav1.PatchOptions{FieldManager: RejoinFieldManager})
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.patchedFrom = n.ResourceVersion
		r.rejoins++
		r.lastErr = ""
		_, since := kubestatus.NodeReadySince(n)
		r.log.Info("put this node back into the peer set", "label", peering.LabelInSet+"=true", "why", why,
			"readySince", since, "afterReady", r.clock.Since(since).Round(time.Millisecond))
		return nil
	case apierrors.IsNotFound(err):
		return nil // the Node is gone: nothing to put back
	}
	// A failed test of the old value (the label changed since the event)
	// is a 422 like a refusal of other kinds: retried, and the retry finds
	// nothing to do when the label did change.
	r.lastErr = err.Error()
	return err
}

func (r *Rejoiner) kick() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Handler serves the kubelet's probes for --rejoin-only: /readyz once the
// watch on the Node has synced, /healthz while the process serves.
func (r *Rejoiner) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		synced, lastErr := r.synced, r.lastErr
		r.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !synced {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: the watch on this node has not synced")
			return
		}
		if lastErr != "" {
			fmt.Fprintf(w, "ready: watching this node; last patch failed: %s\n", lastErr)
			return
		}
		fmt.Fprintln(w, "ready: watching this node")
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// validateRejoinOnly checks the options --rejoin-only uses: no BIRD.
func (o Options) validateRejoinOnly() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name: required (in a DaemonSet, set it from spec.nodeName)"))
	}
	if o.Once {
		errs = append(errs, errors.New("--once and --rejoin-only exclude each other: --once is for BIRD's start"))
	}
	if o.RetryInterval < 0 || o.MaxRetryInterval < 0 {
		errs = append(errs, errors.New("--retry-interval and --max-retry-interval must not be negative"))
	}
	if o.MaxRetryInterval > 0 && o.RetryInterval > o.MaxRetryInterval {
		errs = append(errs, fmt.Errorf("--retry-interval %v is above --max-retry-interval %v", o.RetryInterval, o.MaxRetryInterval))
	}
	return errors.Join(errs...)
}
