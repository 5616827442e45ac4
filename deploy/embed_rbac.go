package deploy

import _ "embed"

// ControllerRBAC is the controller's ClusterRole rebound-controller and
// its Role rebound-leader-election (in rebound-system), without bindings:
// a bench or test binds them to its own identity.
//
//go:embed rbac/controller_role.yaml
var ControllerRBAC []byte

// Namespace is rebound-system.
//
//go:embed controller/namespace.yaml
var Namespace []byte
