package deploy

import _ "embed"

// ControllerRBAC is the controller's ClusterRole rebound-controller and
// its Role rebound-leader-election (in rebound-system), without bindings:
// a bench or test binds them to its own identity.
//
//go:embed rbac/controller_role.yaml
var ControllerRBAC []byte

// DetectionRBAC is what `rebound controller --lease-plane` reads: the Role
// rebound-node-leases (in kube-node-lease) and the ClusterRole
// rebound-controller-detection, and what its fencing writes: the Role
// rebound-fencing-document (in rebound-system), without bindings.
//
//go:embed rbac/controller_detection.yaml
var DetectionRBAC []byte

// Namespace is rebound-system.
//
//go:embed controller/namespace.yaml
var Namespace []byte
