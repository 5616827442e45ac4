package v1alpha1

// Checks of the manifests under deploy/, without a cluster: every object
// decodes strictly as its Kubernetes v1.37 type, the kustomizations list
// every file, the default policy is valid, and RBAC is least privilege.
// (test/e2e applies them to a real API server.)

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	systemNamespace   = "rebound-system"
	agentNamespace    = "rebound-agent"
	defaultPolicyFile = "policy/default-recoverypolicy.yaml"
)

// manifest is one object of one file under deploy/.
type manifest struct {
	file string // relative to deploy/
	raw  []byte
	obj  runtime.Object
}

// kustomization is the part of a Kustomization these manifests use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// loadDeploy decodes every YAML document under deploy/, strictly.
func loadDeploy(t *testing.T) (string, []manifest, map[string]kustomization) {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "deploy")
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	decoder := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()

	var manifests []manifest
	kustomizations := map[string]kustomization{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "monitoring" {
			return filepath.SkipDir // Prometheus rule files, tested by TestAlertRules there
		}
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if filepath.Base(path) == "kustomization.yaml" {
			var k kustomization
			if err := yaml.UnmarshalStrict(data, &k); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
			if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
				t.Errorf("%s: apiVersion/kind = %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", rel, k.APIVersion, k.Kind)
			}
			kustomizations[filepath.Dir(rel)] = k
			return nil
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if runtime.IsNotRegisteredError(err) {
				// Another project's kind (Calico's BGPConfiguration): its
				// schema is checked against the CRD in the e2e tests.
				u := &unstructured.Unstructured{}
				if uerr := yaml.Unmarshal(doc, &u.Object); uerr != nil {
					t.Errorf("%s document %d: %v", rel, i, uerr)
					continue
				}
				obj, err = u, nil
			}
			if err != nil {
				t.Errorf("%s document %d: %v", rel, i, err)
				continue
			}
			manifests = append(manifests, manifest{file: rel, raw: doc, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, manifests, kustomizations
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(append(out, l...), '\n')
		}
	}
	return out
}

func TestDeployManifests(t *testing.T) {
	dir, manifests, kustomizations := loadDeploy(t)
	if len(manifests) == 0 {
		t.Fatal("no manifests under deploy/")
	}

	// Every object is named once, namespaced objects live in rebound-system.
	seen := map[string]string{}
	for _, m := range manifests {
		meta, err := metaOf(m.obj)
		if err != nil {
			t.Fatalf("%s: %v", m.file, err)
		}
		gvk := m.obj.GetObjectKind().GroupVersionKind()
		key := gvk.Kind + " " + meta.GetNamespace() + "/" + meta.GetName()
		if meta.GetName() == "" {
			t.Errorf("%s: %s has no name", m.file, gvk.Kind)
		}
		if prev, ok := seen[key]; ok {
			t.Errorf("%s: %s is also in %s", m.file, key, prev)
		}
		seen[key] = m.file
		switch m.obj.(type) {
		case *unstructured.Unstructured:
			// scope unknown here
		case *corev1.ServiceAccount, *appsv1.DaemonSet, *corev1.Service, *networkingv1.NetworkPolicy:
			// The agents (the BIRD one: hostNetwork, uid 0) have their own
			// privileged namespace, with what serves them (the gossip
			// members' Service and NetworkPolicy); everything else lives
			// in the restricted one.
			if want := namespaceOf(m.file); meta.GetNamespace() != want {
				t.Errorf("%s: %s must be in namespace %s", m.file, key, want)
			}
		case *rbacv1.Role, *rbacv1.RoleBinding:
			// The exceptions: reading the nodes' Leases is granted where
			// they are, not cluster-wide (the controller's Lease plane; a
			// gossip member's own node's Lease, and its quorum GET when
			// it fences); reading the gossip
			// members' EndpointSlices, where they are (their address
			// book).
			leases := meta.GetNamespace() == corev1.NamespaceNodeLease && (meta.GetName() == "rebound-node-leases" || meta.GetName() == "rebound-gossip-node-lease" || meta.GetName() == "rebound-gossip-fencing-lease")
			endpoints := meta.GetNamespace() == namespaceOf(m.file) && meta.GetName() == "rebound-gossip-endpoints"
			if meta.GetNamespace() != systemNamespace && !leases && !endpoints {
				t.Errorf("%s: %s must be in namespace %s", m.file, key, systemNamespace)
			}
		case *appsv1.Deployment, *policyv1.PodDisruptionBudget:
			if meta.GetNamespace() != systemNamespace {
				t.Errorf("%s: %s must be in namespace %s", m.file, key, systemNamespace)
			}
		default:
			if meta.GetNamespace() != "" {
				t.Errorf("%s: %s is cluster-scoped and must have no namespace", m.file, key)
			}
		}
	}

	// Kustomizations: each lists every YAML file beside it and every
	// directory it names has a kustomization; deploy/ ties crd, rbac and
	// controller, not the policy, which needs the CRD established first.
	for kdir, k := range kustomizations {
		listed := sets.New(k.Resources...)
		for _, r := range k.Resources {
			p := filepath.Join(dir, kdir, r)
			st, err := os.Stat(p)
			if err != nil {
				t.Errorf("%s/kustomization.yaml: resource %s: %v", kdir, r, err)
				continue
			}
			if st.IsDir() {
				if _, ok := kustomizations[filepath.Join(kdir, r)]; !ok {
					t.Errorf("%s/kustomization.yaml: directory %s has no kustomization.yaml", kdir, r)
				}
			}
		}
		entries, err := os.ReadDir(filepath.Join(dir, kdir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" && !listed.Has(e.Name()) {
				t.Errorf("%s/kustomization.yaml does not list %s", kdir, e.Name())
			}
		}
	}
	if got, want := sets.List(sets.New(kustomizations["."].Resources...)), []string{"controller", "crd", "rbac"}; !reflect.DeepEqual(got, want) {
		t.Errorf("deploy/kustomization.yaml resources = %v, want %v", got, want)
	}
	for _, d := range []string{"crd", "rbac", "controller", "policy"} {
		if _, ok := kustomizations[d]; !ok {
			t.Errorf("deploy/%s has no kustomization.yaml", d)
		}
	}

	// The CRD is the generated one.
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, m := range manifests {
		if c, ok := m.obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			crds = append(crds, c)
		}
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	if want := []string{"peeringreports.rebound.dev", "recoverypolicies.rebound.dev"}; !reflect.DeepEqual(names, want) {
		t.Errorf("CRDs = %v, want %v", names, want)
	}
}

// namespaceOf is where a file's ServiceAccounts, DaemonSets, Services and
// NetworkPolicies belong: the agents' namespace for deploy/agent and
// deploy/gossip, the controller's elsewhere.
func namespaceOf(file string) string {
	if strings.HasPrefix(file, "agent/") || strings.HasPrefix(file, "gossip/") {
		return agentNamespace
	}
	return systemNamespace
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, errors.New("not an object with metadata")
	}
	return m, nil
}

func TestDefaultPolicy(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", defaultPolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	p, errs := ParseRecoveryPolicy(data)
	if len(errs) > 0 {
		t.Fatalf("%s is invalid:\n%v", defaultPolicyFile, errs)
	}
	if p.Name != "default" {
		t.Errorf("name = %q, want default", p.Name)
	}
	want := RecoveryPolicySpec{
		Critical: CriticalSelector{
			Namespaces:         []string{"kube-system", systemNamespace},
			PriorityClassNames: []string{"system-cluster-critical", "system-node-critical"},
		},
		MaxUnavailableTime: &metav1.Duration{Duration: 30 * time.Second},
		Detection:          DetectionNotReady,
		Actions:            []RescueAction{DeleteAndReplace, ScaleBounce},
		Fencing:            FencingPolicy{Mode: OutOfServiceTaint},
		Limits:             Limits{MaxActionsPerMinute: 10, MaxConcurrent: 5},
	}
	if !reflect.DeepEqual(p.Spec, want) {
		t.Errorf("default policy spec:\n got %+v\nwant %+v", p.Spec, want)
	}

	// The API server's validators on the generated CRD accept it too.
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	if errs := newAPIServer(t).create(obj); len(errs) > 0 {
		t.Errorf("the API server would reject %s: %v", defaultPolicyFile, errs)
	}

	// It is the pods of the seed's essential Deployments it must select.
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{pod("kube-system", "system-cluster-critical", map[string]string{"k8s-app": "kube-dns"}), true},
		{pod("kube-system", "system-node-critical", nil), true},
		{pod("kube-system", "", nil), false},
		{pod("default", "system-cluster-critical", nil), false},
		// rebound's own controller, so that one replica rescues the other.
		{pod(systemNamespace, "system-cluster-critical", map[string]string{"app.kubernetes.io/name": "rebound", "app.kubernetes.io/component": "controller"}), true},
	} {
		got, err := p.Spec.Critical.Matches(tc.pod, nil)
		if err != nil || got != tc.want {
			t.Errorf("default policy Matches(%s, %q) = %v, %v; want %v", tc.pod.Namespace, tc.pod.Spec.PriorityClassName, got, err, tc.want)
		}
	}
}

// permissions flattens RBAC rules to "group/resource:verb" strings.
func permissions(rules []rbacv1.PolicyRule) []string {
	var p []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					p = append(p, g+"/"+res+":"+v)
				}
			}
		}
	}
	sort.Strings(p)
	return slices.Compact(p)
}

func expand(groups, resources, verbs []string) []string {
	return permissions([]rbacv1.PolicyRule{{APIGroups: groups, Resources: resources, Verbs: verbs}})
}

func rbacObjects(t *testing.T) (map[string]*rbacv1.ClusterRole, map[string]*rbacv1.Role, []runtime.Object, sets.Set[string]) {
	t.Helper()
	_, manifests, _ := loadDeploy(t)
	clusterRoles := map[string]*rbacv1.ClusterRole{}
	roles := map[string]*rbacv1.Role{}
	var bindings []runtime.Object
	serviceAccounts := sets.New[string]()
	for _, m := range manifests {
		switch o := m.obj.(type) {
		case *rbacv1.ClusterRole:
			clusterRoles[o.Name] = o
		case *rbacv1.Role:
			roles[o.Namespace+"/"+o.Name] = o
		case *rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding:
			bindings = append(bindings, o)
		case *corev1.ServiceAccount:
			serviceAccounts.Insert(o.Namespace + "/" + o.Name)
		}
	}
	return clusterRoles, roles, bindings, serviceAccounts
}

func TestRBACLeastPrivilege(t *testing.T) {
	clusterRoles, roles, bindings, serviceAccounts := rbacObjects(t)

	for _, name := range []string{"rebound-controller", "rebound-diagnose"} {
		cr, ok := clusterRoles[name]
		if !ok {
			t.Fatalf("ClusterRole %s not found under deploy/", name)
		}
		if cr.AggregationRule != nil {
			t.Errorf("ClusterRole %s must not aggregate other roles", name)
		}
		for i, r := range cr.Rules {
			for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups, r.ResourceNames} {
				for _, s := range list {
					if strings.Contains(s, "*") {
						t.Errorf("ClusterRole %s rule %d has a wildcard %q: list what is used", name, i, s)
					}
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("ClusterRole %s rule %d grants non-resource URLs %v", name, i, r.NonResourceURLs)
			}
		}
	}

	// rebound-diagnose reads, nothing else.
	readOnly := sets.New("get", "list", "watch")
	for i, r := range clusterRoles["rebound-diagnose"].Rules {
		for _, v := range r.Verbs {
			if !readOnly.Has(v) {
				t.Errorf("ClusterRole rebound-diagnose rule %d has verb %q: it must only get, list and watch", i, v)
			}
		}
	}
	if len(clusterRoles["rebound-diagnose"].Rules) == 0 {
		t.Error("ClusterRole rebound-diagnose has no rules")
	}
	// Its Roles in rebound-system read ConfigMaps by name only; the
	// fencing document is got, nothing more.
	for _, name := range []string{"rebound-diagnose-peering", "rebound-diagnose-fencing"} {
		role, ok := roles[systemNamespace+"/"+name]
		if !ok {
			t.Fatalf("Role %s/%s not found", systemNamespace, name)
		}
		for i, r := range role.Rules {
			for _, v := range r.Verbs {
				if !readOnly.Has(v) {
					t.Errorf("Role %s rule %d has verb %q: it must only read", name, i, v)
				}
			}
			if !slices.Equal(r.Resources, []string{"configmaps"}) || len(r.ResourceNames) == 0 {
				t.Errorf("Role %s rule %d: %v %v, want configmaps by name", name, i, r.Resources, r.ResourceNames)
			}
		}
	}
	if got := roles[systemNamespace+"/rebound-diagnose-fencing"].Rules; len(got) != 1 || !slices.Equal(got[0].Verbs, []string{"get"}) ||
		!slices.Equal(got[0].ResourceNames, []string{"rebound-fencing"}) {
		t.Errorf("Role rebound-diagnose-fencing rules = %+v, want get on configmaps [rebound-fencing]", got)
	}

	// rebound-controller and rebound-leader-election grant exactly the
	// calls the controller's code makes: internal/controller/rbac_test.go
	// records those calls and compares them with deploy/rbac.
	if _, ok := roles[systemNamespace+"/rebound-leader-election"]; !ok {
		t.Fatal("Role rebound-system/rebound-leader-election not found")
	}
	for _, p := range permissions(clusterRoles["rebound-controller"].Rules) {
		if strings.HasPrefix(p, "coordination.k8s.io/") {
			t.Errorf("ClusterRole rebound-controller grants %s cluster-wide: leases belong in the namespaced Role", p)
		}
	}

	// Every binding points at a role and ServiceAccounts defined here.
	bound := sets.New[string]()
	for _, b := range bindings {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		var name string
		switch b := b.(type) {
		case *rbacv1.ClusterRoleBinding:
			ref, subjects, name = b.RoleRef, b.Subjects, "ClusterRoleBinding "+b.Name
			if ref.Kind != "ClusterRole" || clusterRoles[ref.Name] == nil {
				t.Errorf("%s refers to %s %s, not defined under deploy/", name, ref.Kind, ref.Name)
			}
		case *rbacv1.RoleBinding:
			ref, subjects, name = b.RoleRef, b.Subjects, "RoleBinding "+b.Name
			if ref.Kind != "Role" || roles[b.Namespace+"/"+ref.Name] == nil {
				t.Errorf("%s refers to %s %s, not defined in %s under deploy/", name, ref.Kind, ref.Name, b.Namespace)
			}
		}
		if ref.APIGroup != rbacv1.GroupName {
			t.Errorf("%s: roleRef.apiGroup = %q, want %s", name, ref.APIGroup, rbacv1.GroupName)
		}
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind || !serviceAccounts.Has(s.Namespace+"/"+s.Name) {
				t.Errorf("%s binds %s %s/%s, not a ServiceAccount defined under deploy/", name, s.Kind, s.Namespace, s.Name)
			}
			bound.Insert(ref.Name + "=" + s.Namespace + "/" + s.Name)
		}
	}
	for _, b := range []string{
		"rebound-controller=rebound-system/rebound",
		"rebound-leader-election=rebound-system/rebound",
		"rebound-diagnose=rebound-system/rebound-diagnose",
		"rebound-diagnose-peering=rebound-system/rebound-diagnose",
		"rebound-diagnose-fencing=rebound-system/rebound-diagnose",
	} {
		if !bound.Has(b) {
			t.Errorf("missing binding %s", b)
		}
	}
}

func TestControllerDeployment(t *testing.T) {
	_, manifests, _ := loadDeploy(t)
	var d *appsv1.Deployment
	var ns *corev1.Namespace
	serviceAccounts := sets.New[string]()
	for _, m := range manifests {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			if d != nil {
				t.Fatalf("more than one Deployment under deploy/")
			}
			d = o
		case *corev1.Namespace:
			if o.Name == systemNamespace {
				ns = o
			}
		case *corev1.ServiceAccount:
			serviceAccounts.Insert(o.Name)
		}
	}
	if ns == nil || ns.Name != systemNamespace {
		t.Fatalf("Namespace %s not found under deploy/", systemNamespace)
	}
	if d == nil {
		t.Fatal("controller Deployment not found under deploy/")
	}
	spec := d.Spec.Template.Spec
	if !serviceAccounts.Has(spec.ServiceAccountName) || spec.ServiceAccountName != "rebound" {
		t.Errorf("serviceAccountName = %q, want rebound (defined under deploy/)", spec.ServiceAccountName)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the Deployment's selector %v does not select its pods (%v)", d.Spec.Selector, err)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want 1 container, have %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "rebound:dev" {
		t.Errorf("image = %q, want rebound:dev", c.Image)
	}
	if cmd := strings.Join(append(slices.Clone(c.Command), c.Args...), " "); cmd != "rebound-manager controller --leader-elect --namespace=$(POD_NAMESPACE)" {
		t.Errorf("command = %q, want rebound-manager controller --leader-elect --namespace=$(POD_NAMESPACE)", cmd)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !reflect.DeepEqual(ports, map[string]int32{"metrics": 8443, "health": 8081}) {
		t.Errorf("ports = %v, want metrics 8443 and health 8081", ports)
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET of %s", pr.name, pr.path)
			continue
		}
		g := pr.probe.HTTPGet
		if g.Path != pr.path || ports[g.Port.String()] != 8081 && g.Port.IntValue() != 8081 {
			t.Errorf("%s probe gets %s on %s, want %s on 8081", pr.name, g.Path, g.Port.String(), pr.path)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("pod securityContext.runAsNonRoot must be true")
	case psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Error("pod securityContext.runAsUser must be a non-root uid")
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("pod securityContext.seccompProfile must be RuntimeDefault")
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container securityContext.readOnlyRootFilesystem must be true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container securityContext.allowPrivilegeEscalation must be false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("container securityContext.capabilities must drop ALL and add none")
	}
	checkControllerPlacement(t, d)
}

// checkControllerPlacement: rebound survives what it rescues. The
// replicas run where the control plane runs, never two on one node, with
// a priority class, and the default RecoveryPolicy selects their pods, so
// the surviving replica rescues the other.
func checkControllerPlacement(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas = %v, want 2: one replica rescues the other", d.Spec.Replicas)
	}
	const controlPlane = "node-role.kubernetes.io/control-plane"
	var na *corev1.NodeSelector
	if spec.Affinity != nil && spec.Affinity.NodeAffinity != nil {
		na = spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if na == nil || len(na.NodeSelectorTerms) != 1 || !slices.ContainsFunc(na.NodeSelectorTerms[0].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
		return r.Key == controlPlane && r.Operator == corev1.NodeSelectorOpExists
	}) {
		t.Errorf("node affinity %+v: want required %s Exists (kubeadm labels it \"\", others \"true\")", na, controlPlane)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == controlPlane && tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("tolerations %+v: the control-plane nodes' NoSchedule taint is not tolerated", spec.Tolerations)
	}
	var anti []corev1.PodAffinityTerm
	if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
		anti = spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	spread := false
	for _, term := range anti {
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err == nil && term.TopologyKey == corev1.LabelHostname && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			spread = true
		}
	}
	if !spread {
		t.Errorf("pod anti-affinity %+v: want a required term on %s selecting the controller's own pods", anti, corev1.LabelHostname)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName = %q, want system-cluster-critical", spec.PriorityClassName)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", defaultPolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	p, errs := ParseRecoveryPolicy(data)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Labels: d.Spec.Template.Labels}, Spec: spec}
	if ok, err := p.Spec.Critical.Matches(pod, nil); err != nil || !ok {
		t.Errorf("the default RecoveryPolicy does not select the controller's own pods (%v): a replica on a dead node would stay there", err)
	}
}
