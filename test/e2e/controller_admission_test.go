package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/chartrender"
	"rebound/pkg/fencing"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
	"rebound/pkg/rescue"
	"rebound/pkg/unreachable"
)

// The controller's identity and its admission policies, as deploy/rbac
// defines them.
const (
	controllerUser     = "system:serviceaccount:rebound-system:rebound"
	deploymentsPolicy  = "ValidatingAdmissionPolicy 'rebound-controller-deployments'"
	nodesPolicy        = "ValidatingAdmissionPolicy 'rebound-controller-nodes'"
	podStatusPolicy    = "ValidatingAdmissionPolicy 'rebound-controller-pod-status'"
	outOfServiceTaint  = `{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}`
	admissionTestLabel = "e2e.rebound.dev/role"
)

// TestControllerAdmissionPolicy: deploy/'s manifests (kustomize build of
// deploy/ and of the peering controller's RBAC) on the sandbox's real
// apiserver. With a token of the controller's ServiceAccount alone, a
// Deployment can be scaled and carry or lose rebound's bounce annotations,
// a Node's peering.rebound.dev/in-set label can be set and removed, and so
// can its rebound.dev/unreachable:NoSchedule taint, beside any other; a
// pod's Ready or ContainersReady condition can be set False through its
// status. A change of image, ServiceAccount, another annotation or label,
// any other taint (out-of-service included, added or removed), rebound's
// key with another effect or a value, a cordon, a pod condition set True,
// added, or another one changed, or any other field of a pod's status is
// refused by the policies, by name. Then `rebound controller --peering`, run with that
// token, labels the nodes and scale-bounces a Deployment for real, and
// neither the audit log nor its own log shows a write of it refused.
func TestControllerAdmissionPolicy(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 3, s7Timings())
	ctx := testContext(t, 8*time.Minute)
	cl := newClient(t, c)
	applyDeployBases(ctx, t, cl)
	applyFiles(ctx, t, cl, false, writePolicy(t, "admission", s7PolicyTime))

	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = serviceAccountToken(ctx, t, c, "rebound-system", "rebound")
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin := c.Client

	// A Deployment outside the RecoveryPolicy's namespaces: the controller
	// started below leaves it alone.
	ensureDefaultServiceAccount(ctx, t, c, "default")
	target := scenario.Workload{Namespace: "default", Name: "admission-target"}
	if err := target.Create(ctx, admin); err != nil {
		t.Fatal(err)
	}
	deployments := sa.AppsV1().Deployments(target.Namespace)
	// update is what the executor does (pkg/rescue/execute): Get, change,
	// Update with the object's resourceVersion; a conflict (the deployment
	// controller writes too) is retried with a fresh Get.
	update := func(change func(d *appsv1.Deployment)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := deployments.Get(ctx, target.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(d)
			_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
	}
	patchNode := func(node, patch string, opts metav1.PatchOptions) error {
		_, err := sa.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), opts)
		return err
	}
	// patchPodStatus is the unreachable reconciler's write: a strategic
	// merge patch of the pod's status subresource.
	patchPodStatus := func(pod, patch string, opts metav1.PatchOptions) error {
		_, err := sa.CoreV1().Pods(target.Namespace).Patch(ctx, pod, types.StrategicMergePatchType, []byte(patch), opts, "status")
		return err
	}
	targetPod := func() *corev1.Pod {
		var pod *corev1.Pod
		poll(ctx, t, time.Minute, target.String()+" has a Ready pod", func() (bool, string) {
			pods, err := admin.CoreV1().Pods(target.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + target.Name})
			if err != nil {
				return false, err.Error()
			}
			for i := range pods.Items {
				if p := &pods.Items[i]; p.DeletionTimestamp == nil && kubestatus.PodReady(p) {
					pod = p
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d pods, none Ready", len(pods.Items))
		})
		return pod
	}

	// The policies take effect a moment after they are created: wait
	// until a dry run of a refused change is refused by each (a dry run
	// goes through admission and stores nothing).
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	probe := targetPod()
	poll(ctx, t, 30*time.Second, "the admission policies in effect", func() (bool, string) {
		errPod := patchPodStatus(probe.Name, `{"status":{"phase":"Failed"}}`, metav1.PatchOptions{DryRun: dryRun.DryRun})
		if errPod == nil || !strings.Contains(errPod.Error(), podStatusPolicy) {
			return false, fmt.Sprintf("pod status: %v", errPod)
		}
		errNode := patchNode("node-1", `{"spec":{"unschedulable":true}}`, metav1.PatchOptions{DryRun: dryRun.DryRun})
		errDep := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := deployments.Get(ctx, target.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template.Spec.Containers[0].Image = "registry.invalid/probe"
			_, err = deployments.Update(ctx, d, dryRun)
			return err
		})
		return errNode != nil && strings.Contains(errNode.Error(), nodesPolicy) &&
				errDep != nil && strings.Contains(errDep.Error(), deploymentsPolicy),
			fmt.Sprintf("node: %v; deployment: %v", errNode, errDep)
	})

	// The apiserver type-checks each policy against the schemas of the
	// kinds it matches; a warning there is an expression that would fail
	// (and so deny) at run time.
	for _, name := range []string{"rebound-controller-deployments", "rebound-controller-nodes", "rebound-controller-pod-status"} {
		poll(ctx, t, 30*time.Second, name+" type-checked", func() (bool, string) {
			p, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
				return false, fmt.Sprintf("status %+v", p.Status)
			}
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("%s: %s: %s", name, w.FieldRef, w.Warning)
			}
			return true, ""
		})
	}
	t.Run("Deployment", func(t *testing.T) {
		allowed := []struct {
			what   string
			change func(d *appsv1.Deployment)
		}{
			{"scale to 2", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](2) }},
			{"scale-down half of a bounce: replicas 0 and both annotations", func(d *appsv1.Deployment) {
				if d.Annotations == nil {
					d.Annotations = map[string]string{}
				}
				d.Annotations[rescue.ScaleBounceAnnotation] = "2"
				d.Annotations[rescue.ScaleBouncedForAnnotation] = time.Now().UTC().Format(time.RFC3339)
				d.Spec.Replicas = ptr.To[int32](0)
			}},
			{"restore half: replicas back, the replicas annotation removed", func(d *appsv1.Deployment) {
				delete(d.Annotations, rescue.ScaleBounceAnnotation)
				d.Spec.Replicas = ptr.To[int32](2)
			}},
			{"remove the bounced-for annotation", func(d *appsv1.Deployment) { delete(d.Annotations, rescue.ScaleBouncedForAnnotation) }},
			{"an update that changes nothing", func(*appsv1.Deployment) {}},
		}
		for _, a := range allowed {
			if err := update(a.change); err != nil {
				t.Errorf("%s: %v, want it allowed", a.what, err)
			}
		}
		d, err := admin.AppsV1().Deployments(target.Namespace).Get(ctx, target.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas != 2 || d.Annotations[rescue.ScaleBounceAnnotation] != "" || d.Annotations[rescue.ScaleBouncedForAnnotation] != "" {
			t.Errorf("after the allowed updates: replicas %d, annotations %v; want 2 and no rebound annotation", *d.Spec.Replicas, d.Annotations)
		}

		refused := []struct {
			what   string
			change func(d *appsv1.Deployment)
		}{
			{"change the image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.invalid/evil:1" }},
			{"change the ServiceAccount", func(d *appsv1.Deployment) { d.Spec.Template.Spec.ServiceAccountName = "cluster-admin-sa" }},
			{"add a container", func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Image: "registry.invalid/evil:1"})
			}},
			{"scale and change the image in one update", func(d *appsv1.Deployment) {
				d.Spec.Replicas = ptr.To[int32](0)
				d.Spec.Template.Spec.Containers[0].Image = "registry.invalid/evil:1"
			}},
			{"pause the rollout", func(d *appsv1.Deployment) { d.Spec.Paused = true }},
			{"set another annotation", func(d *appsv1.Deployment) {
				metav1.SetMetaDataAnnotation(&d.ObjectMeta, "example.com/owner", "mallory")
			}},
			{"set a rebound.dev annotation rebound does not write", func(d *appsv1.Deployment) {
				metav1.SetMetaDataAnnotation(&d.ObjectMeta, "rebound.dev/other", "x")
			}},
			{"change a label", func(d *appsv1.Deployment) { metav1.SetMetaDataLabel(&d.ObjectMeta, admissionTestLabel, "x") }},
			{"add a finalizer", func(d *appsv1.Deployment) { d.Finalizers = append(d.Finalizers, "example.com/hold") }},
		}
		for _, r := range refused {
			wantRefused(t, r.what, deploymentsPolicy, update(r.change))
		}
		after, err := admin.AppsV1().Deployments(target.Namespace).Get(ctx, target.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Generation != d.Generation || after.Spec.Template.Spec.Containers[0].Image != d.Spec.Template.Spec.Containers[0].Image {
			t.Errorf("a refused update changed the Deployment: generation %d -> %d, image %s", d.Generation, after.Generation, after.Spec.Template.Spec.Containers[0].Image)
		}
	})

	t.Run("Node", func(t *testing.T) {
		inSet := func(v string) string {
			return fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, peering.LabelInSet, v)
		}
		// The peering reconciler's own patch (internal/controller), both
		// values, then the label removed; and a server-side apply of it,
		// which changes managedFields besides.
		for _, v := range []string{`"true"`, `"false"`, `null`} {
			if err := patchNode("node-1", inSet(v), metav1.PatchOptions{}); err != nil {
				t.Errorf("label node-1 %s=%s: %v, want it allowed", peering.LabelInSet, v, err)
			}
		}
		apply := fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-1","labels":{%q:"true"}}}`, peering.LabelInSet)
		if _, err := sa.CoreV1().Nodes().Patch(ctx, "node-1", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "rebound-e2e-sa"}); err != nil {
			t.Errorf("server-side apply of node-1's %s: %v, want it allowed", peering.LabelInSet, err)
		}
		if err := patchNode("node-1", inSet(`null`), metav1.PatchOptions{}); err != nil {
			t.Errorf("remove node-1's %s: %v, want it allowed", peering.LabelInSet, err)
		}

		// node-2 carries out-of-service (set by the admin): the credential
		// may not lift it either.
		if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-2", types.MergePatchType, []byte(`{"spec":{"taints":[`+outOfServiceTaint+`]}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// The unreachable reconciler's own patches (internal/controller):
		// the whole taint list with rebound's taint added or removed,
		// every other taint as it was.
		added := time.Now().UTC().Format(time.RFC3339)
		mark := fmt.Sprintf(`{"key":%q,"effect":"NoSchedule","timeAdded":%q}`, unreachable.TaintKey, added)
		for _, a := range []struct{ what, node, patch string }{
			{"mark node-1 unreachable", "node-1", `{"spec":{"taints":[` + mark + `]}}`},
			{"unmark node-1", "node-1", `{"spec":{"taints":null}}`},
			{"mark node-2 unreachable beside its out-of-service taint", "node-2", `{"spec":{"taints":[` + outOfServiceTaint + `,` + mark + `]}}`},
			{"unmark node-2, its out-of-service taint kept", "node-2", `{"spec":{"taints":[` + outOfServiceTaint + `]}}`},
		} {
			if err := patchNode(a.node, a.patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("%s: %v, want it allowed", a.what, err)
			}
		}
		refused := []struct{ what, node, patch string }{
			{"rebound's key with effect NoExecute", "node-1", fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"effect":"NoExecute"}]}}`, unreachable.TaintKey)},
			{"rebound's taint with a value", "node-1", fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"x","effect":"NoSchedule"}]}}`, unreachable.TaintKey)},
			{"rebound's taint and another in one patch", "node-1", `{"spec":{"taints":[` + mark + `,{"key":"example.com/maintenance","effect":"NoSchedule"}]}}`},
			{"rebound's taint and a cordon in one patch", "node-1", `{"spec":{"unschedulable":true,"taints":[` + mark + `]}}`},
			{"node-2's out-of-service taint swapped for rebound's", "node-2", `{"spec":{"taints":[` + mark + `]}}`},
			{"taint node-1 out-of-service", "node-1", `{"spec":{"taints":[` + outOfServiceTaint + `]}}`},
			{"taint node-1 NoSchedule", "node-1", `{"spec":{"taints":[{"key":"example.com/maintenance","effect":"NoSchedule"}]}}`},
			{"remove node-2's out-of-service taint", "node-2", `{"spec":{"taints":null}}`},
			{"cordon node-1", "node-1", `{"spec":{"unschedulable":true}}`},
			{"set the operator's keep-in-mesh label", "node-1", fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, peering.LabelKeepInMesh)},
			{"set another label", "node-1", fmt.Sprintf(`{"metadata":{"labels":{%q:"x"}}}`, admissionTestLabel)},
			{"remove the hostname label", "node-1", `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`},
			{"set the in-set label to a value that is not true or false", "node-1", inSet(`"maybe"`)},
			{"set the in-set label and taint in one patch", "node-1", `{"metadata":{"labels":{"` + peering.LabelInSet + `":"true"}},"spec":{"taints":[` + outOfServiceTaint + `]}}`},
			{"set an annotation", "node-1", `{"metadata":{"annotations":{"example.com/owner":"mallory"}}}`},
		}
		for _, r := range refused {
			wantRefused(t, r.what, nodesPolicy, patchNode(r.node, r.patch, metav1.PatchOptions{}))
		}
		n1, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hasTaint(n1, "node.kubernetes.io/out-of-service") || hasTaint(n1, "example.com/maintenance") || n1.Spec.Unschedulable ||
			n1.Labels[admissionTestLabel] != "" || n1.Labels[peering.LabelKeepInMesh] != "" || n1.Labels[peering.LabelInSet] != "" || n1.Labels["kubernetes.io/hostname"] != "node-1" {
			t.Errorf("node-1 after the refused patches: taints %v, unschedulable %v, labels %v", n1.Spec.Taints, n1.Spec.Unschedulable, n1.Labels)
		}
		n2, err := admin.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasTaint(n2, "node.kubernetes.io/out-of-service") {
			t.Errorf("node-2's taints after the refused removal: %v, want out-of-service still there", n2.Spec.Taints)
		}
		if hasTaint(n1, unreachable.TaintKey) || hasTaint(n2, unreachable.TaintKey) {
			t.Errorf("rebound's taint left after the allowed removals: node-1 %v, node-2 %v", n1.Spec.Taints, n2.Spec.Taints)
		}
		if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-2", types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}

		// Watchdog fencing (docs/fencing.md): the out-of-service taint on a
		// NotReady node only, with the boot it fences; off only on
		// another boot, Ready.
		setBoot := func(boot string) {
			t.Helper()
			patch := fmt.Sprintf(`{"status":{"nodeInfo":{"bootID":%q}}}`, boot)
			if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				t.Fatal(err)
			}
		}
		// The patches carry node-1's whole taint list, as the fencing
		// reconciler's do: kube-controller-manager's own taints stay.
		taintsWith := func(extra string) string {
			t.Helper()
			n, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, tt := range n.Spec.Taints {
				if tt.Key == corev1.TaintNodeOutOfService {
					continue
				}
				b, err := json.Marshal(tt)
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, string(b))
			}
			if extra != "" {
				parts = append(parts, extra)
			}
			return "[" + strings.Join(parts, ",") + "]"
		}
		fence := func(boot string) string {
			return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"taints":%s}}`, fencing.AnnotationFencedBoot, boot, taintsWith(outOfServiceTaint))
		}
		verify := fmt.Sprintf(`{"metadata":{"annotations":{%q:"node-1-1"}}}`, fencing.AnnotationVerified)
		unfence := func() string {
			return fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}},"spec":{"taints":%s}}`, fencing.AnnotationFencedBoot, fencing.AnnotationVerified, taintsWith(""))
		}
		// Waits until kube-controller-manager's unreachable taints are on
		// (or off) node-1, so that they do not change under a patch.
		unreachableTaints := func(on bool) {
			t.Helper()
			poll(ctx, t, 2*time.Minute, fmt.Sprintf("node-1's unreachable taints on: %v", on), func() (bool, string) {
				n, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				noExec, noSched := false, false
				for _, tt := range n.Spec.Taints {
					if tt.Key == corev1.TaintNodeUnreachable {
						noExec = noExec || tt.Effect == corev1.TaintEffectNoExecute
						noSched = noSched || tt.Effect == corev1.TaintEffectNoSchedule
					}
				}
				return noExec == on && noSched == on, fmt.Sprintf("%v", n.Spec.Taints)
			})
		}
		setBoot("boot-a")
		wantRefused(t, "fence a Ready node", nodesPolicy, patchNode("node-1", fence("boot-a"), metav1.PatchOptions{}))
		if err := c.StopNode(ctx, "node-1"); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitNodeReady(ctx, "node-1", false, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		unreachableTaints(true)
		for _, r := range []struct{ what, patch string }{
			{"fence without recording the boot", `{"spec":{"taints":` + taintsWith(outOfServiceTaint) + `}}`},
			{"fence recording another boot", fence("boot-z")},
			{"fence with another value", fmt.Sprintf(`{"metadata":{"annotations":{%q:"boot-a"}},"spec":{"taints":%s}}`, fencing.AnnotationFencedBoot,
				taintsWith(`{"key":"node.kubernetes.io/out-of-service","value":"x","effect":"NoExecute"}`))},
			{"verify before the taint", verify},
		} {
			wantRefused(t, r.what, nodesPolicy, patchNode("node-1", r.patch, metav1.PatchOptions{}))
		}
		if err := patchNode("node-1", fence("boot-a"), metav1.PatchOptions{}); err != nil {
			t.Errorf("fence NotReady node-1 recording its boot: %v, want it allowed", err)
		}
		wantRefused(t, "unfence on the same boot", nodesPolicy, patchNode("node-1", unfence(), metav1.PatchOptions{}))
		if err := patchNode("node-1", verify, metav1.PatchOptions{}); err != nil {
			t.Errorf("verify node-1's fencing: %v, want it allowed", err)
		}
		wantRefused(t, "verify again with another round", nodesPolicy, patchNode("node-1", fmt.Sprintf(`{"metadata":{"annotations":{%q:"node-1-2"}}}`, fencing.AnnotationVerified), metav1.PatchOptions{}))
		setBoot("boot-b")
		wantRefused(t, "unfence on a new boot, not Ready yet", nodesPolicy, patchNode("node-1", unfence(), metav1.PatchOptions{}))
		if err := c.StartNode(ctx, "node-1"); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitNodeReady(ctx, "node-1", true, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		unreachableTaints(false)
		if err := patchNode("node-1", unfence(), metav1.PatchOptions{}); err != nil {
			t.Errorf("unfence node-1, Ready on a new boot: %v, want it allowed", err)
		}
		if n1, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); err != nil || hasTaint(n1, "node.kubernetes.io/out-of-service") || len(n1.Annotations[fencing.AnnotationFencedBoot]) > 0 {
			t.Errorf("node-1 after unfencing: %v %v", n1, err)
		}
	})

	t.Run("PodStatus", func(t *testing.T) {
		// Each write says something new: kwok sets a pod Ready again by
		// its status alone, keeping the reason and message written before,
		// and a write that changes nothing is no change to refuse.
		writes := 0
		condition := func(typ, status string) string {
			writes++
			return fmt.Sprintf(`{"type":%q,"status":%q,"reason":%q,"message":"rebound-e2e write %d"}`, typ, status, unreachable.PodReasonNodeUnreachable, writes)
		}
		conditions := func(cs ...string) string { return `{"status":{"conditions":[` + strings.Join(cs, ",") + `]}}` }
		// kwok makes a Running pod Ready again (the sandbox's stages), as a
		// live kubelet would: each allowed change starts from a Ready pod.
		for _, a := range []struct{ what, patch string }{
			{"Ready set False, as the reconciler does", conditions(condition("Ready", "False"))},
			{"ContainersReady set False", conditions(condition("ContainersReady", "False"))},
		} {
			pod := targetPod()
			if err := patchPodStatus(pod.Name, a.patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("%s: %v, want it allowed", a.what, err)
			}
		}
		pod := targetPod()
		before := pod.DeepCopy()
		for _, r := range []struct{ what, patch string }{
			{"Ready set True", conditions(condition("Ready", "True"))},
			{"PodScheduled set False", conditions(condition("PodScheduled", "False"))},
			{"Ready False and PodScheduled False in one patch", conditions(condition("Ready", "False"), condition("PodScheduled", "False"))},
			{"a condition added", conditions(condition("DisruptionTarget", "True"))},
			{"the phase set Failed", `{"status":{"phase":"Failed"}}`},
			{"the status message set", `{"status":{"message":"rebound-e2e"}}`},
			{"a label set through the status", fmt.Sprintf(`{"metadata":{"labels":{%q:"x"}}}`, admissionTestLabel)},
			{"Ready set False and a label in one patch", fmt.Sprintf(`{"metadata":{"labels":{%q:"x"}},"status":{"conditions":[%s]}}`, admissionTestLabel, condition("Ready", "False"))},
		} {
			wantRefused(t, r.what, podStatusPolicy, patchPodStatus(pod.Name, r.patch, metav1.PatchOptions{}))
		}
		after, err := admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Status.Phase != before.Status.Phase || after.Status.Message != "" || after.Labels[admissionTestLabel] != "" || len(after.Status.Conditions) != len(before.Status.Conditions) {
			t.Errorf("a refused patch changed pod %s: phase %s, message %q, labels %v, conditions %v", pod.Name, after.Status.Phase, after.Status.Message, after.Labels, after.Status.Conditions)
		}
	})
	if t.Failed() {
		return
	}

	// The real controller, with that token: its peering reconciler labels
	// every node (none carries the label before: only the controller sets
	// it here, so each label is one of its patches admitted), and the
	// recovery reconciler scale-bounces S9's short Deployment (down with
	// both annotations, then back), through the policies.
	unlabelled := func() []string {
		nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range nodes.Items {
			if _, ok := n.Labels[peering.LabelInSet]; !ok {
				out = append(out, n.Name)
			}
		}
		return out
	}
	if got := unlabelled(); len(got) != len(c.NodeNames) {
		t.Fatalf("before the controller starts, only %v lack %s, want every node", got, peering.LabelInSet)
	}
	cutoff := time.Now()
	ctrlProc := startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--peering", "--replacement-timeout", "10s")
	poll(ctx, t, time.Minute, "every node labelled "+peering.LabelInSet+" by the controller", func() (bool, string) {
		missing := unlabelled()
		return len(missing) == 0, fmt.Sprintf("unlabelled: %v", missing)
	})
	short := scenario.CriticalStandIn("node-1")
	short.Name = "admission-short"
	res, err := scenario.RunS9(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S9Options{
		Short:        short,
		OthersNode:   "node-2",
		Survivor:     "node-0",
		ObserveAfter: 5 * time.Second,
		User:         controllerUser,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ShortUpdates != 2 || res.BouncedFor == "" {
		t.Errorf("the controller wrote %s %d time(s), bounced for %q; want one bounce (2 updates) with its annotation", short, res.ShortUpdates, res.BouncedFor)
	}

	// The audit log has every Deployment write (not Node patches); the
	// controller logs any refused write, Node label or Deployment.
	refused, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		// A conflict (a stale resourceVersion) or a vanished object is
		// the controller's own precondition, not a refusal.
		return e.User.Username == controllerUser && !e.RequestReceivedTimestamp.Time.Before(cutoff) &&
			e.ObjectRef.Resource == "deployments" && (e.Verb == "update" || e.Verb == "patch") &&
			e.ResponseStatus.Code >= 400 && e.ResponseStatus.Code != 409 && e.ResponseStatus.Code != 404
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range refused {
		t.Errorf("the controller's %s of Deployment %s/%s was refused (%d)", e.Verb, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ResponseStatus.Code)
	}
	log, err := os.ReadFile(ctrlProc.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "ValidatingAdmissionPolicy") {
			t.Errorf("the controller was refused by an admission policy: %s", line)
		}
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// wantRefused fails unless err is the apiserver's refusal by the named
// admission policy.
func wantRefused(t *testing.T, what, policy string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want refused by %s", what, policy)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("%s: %v, want Forbidden or Invalid from %s", what, err, policy)
	case !strings.Contains(err.Error(), policy):
		t.Errorf("%s: %v, want the refusal of %s", what, err, policy)
	}
}

// applyDeployBases server-side applies the kustomize builds of deploy/
// and deploy/agent/controller-rbac (the peering controller's rules), as
// `kubectl apply --server-side -k` would: the CRDs and the namespace
// first, then the rest. The controller's Deployment is left out: the
// test runs the controller as a process with its ServiceAccount's token.
func applyDeployBases(ctx context.Context, t *testing.T, cl client.Client) {
	t.Helper()
	var first, rest []*unstructured.Unstructured
	for _, dir := range []string{"deploy", "deploy/agent/controller-rbac"} {
		objs, err := chartrender.Kustomize(repoPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "CustomResourceDefinition", "Namespace":
				first = append(first, o)
			case "Deployment":
			default:
				rest = append(rest, o)
			}
		}
	}
	applyChart(ctx, t, cl, first, false)
	waitCRDEstablished(ctx, t, cl, "recoverypolicies.rebound.dev")
	waitCRDEstablished(ctx, t, cl, "peeringreports.rebound.dev")
	applyChart(ctx, t, cl, rest, false)
}

// ensureDefaultServiceAccount creates ns's "default" ServiceAccount, which
// the ServiceAccount admission plugin wants for a pod and the
// controller-manager may not have made yet.
func ensureDefaultServiceAccount(ctx context.Context, t *testing.T, c *sandbox.Cluster, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
