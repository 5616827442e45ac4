package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The validation below is layered (see STYLE.md): OpenAPI and CEL rules in
// the CRD reject bad objects at the API server, and Validate (validation.go)
// runs the same checks in Go for CLIs and the controller. Keep both in step;
// crd_test.go runs the API server's own validators on the generated CRD and
// compares them with Validate.
//
// CEL cost: the API server estimates each rule's worst case from the
// schema's maxItems/maxLength. Our own lists are bounded; the selector rules
// walk metav1.LabelSelector's matchExpressions, which upstream leaves
// unbounded, and so dominate the estimate (about 3M of the 10M allowed per
// rule; crd_test.go logs every rule's cost and keeps a margin).

// RescueAction is one way rebound may move a stranded pod.
// +kubebuilder:validation:Enum=DeleteAndReplace;ScaleBounce
type RescueAction string

const (
	// DeleteAndReplace deletes the stranded pod so that its ReplicaSet
	// creates a replacement on a Ready node. Stateless owners only.
	DeleteAndReplace RescueAction = "DeleteAndReplace"
	// ScaleBounce scales the owning Deployment to 0 and back: the fallback
	// of the seed's fix when a replacement does not appear.
	ScaleBounce RescueAction = "ScaleBounce"
)

// FencingMode says what proves that a NotReady node is really off, before a
// pod with identity or exclusive storage (StatefulSet, ReadWriteOnce volume)
// may be force-deleted from it.
// +kubebuilder:validation:Enum=OutOfServiceTaint;Watchdog;Never
type FencingMode string

const (
	// OutOfServiceTaint: the node carries node.kubernetes.io/out-of-service
	// (non-graceful node shutdown), put there by a person or a fencing agent
	// once the node is confirmed off.
	OutOfServiceTaint FencingMode = "OutOfServiceTaint"
	// Watchdog: as OutOfServiceTaint, and rebound puts the taint on
	// itself once it has proven that the node's watchdog reset it (the
	// node's agent runs with a watchdog device; docs/fencing.md).
	Watchdog FencingMode = "Watchdog"
	// Never: stateful pods are only reported, never moved.
	Never FencingMode = "Never"
)

// Detection says what makes a node count as down for a policy's pods, and
// so when their maxUnavailableTime starts.
// +kubebuilder:validation:Enum=NotReady;TwoPlanes
type Detection string

const (
	// DetectionNotReady: the node's Ready condition is not True, which
	// kube-controller-manager decides once its node grace period (50 s by
	// default) has passed without a heartbeat.
	DetectionNotReady Detection = "NotReady"
	// DetectionTwoPlanes: as NotReady, and also a node the API still has
	// Ready that rebound found dead on both planes (its Lease not renewed
	// on rebound's clock, and a quorum of its gossip watchers say dead)
	// and marked with the taint rebound.dev/unreachable. The clock then
	// starts at that detection, seconds after the death rather than at
	// the end of the node grace period.
	DetectionTwoPlanes Detection = "TwoPlanes"
)

// MaxMaxUnavailableTime is the largest maxUnavailableTime accepted. The
// defaults of the optional fields are the +kubebuilder:default markers
// below, and only those (see defaults.go).
const MaxMaxUnavailableTime = "1h"

// RecoveryPolicySpec says which workloads are critical and how fast and how
// far rebound may go to bring them back.
type RecoveryPolicySpec struct {
	// Critical selects the critical workloads' pods. A pod is critical when
	// it matches every selector that is set; at least one must be set.
	Critical CriticalSelector `json:"critical"`

	// MaxUnavailableTime is how long a critical pod may sit on a NotReady
	// node before rebound acts, if upstream eviction will not move it
	// within that time. A Go duration between 0s and 1h, e.g. 30s.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self >= duration('0s') && self <= duration('1h')",message="spec.maxUnavailableTime must be between 0s and 1h: set a duration such as 30s"
	// +optional
	MaxUnavailableTime *metav1.Duration `json:"maxUnavailableTime,omitempty"`

	// Detection says when a node counts as down for this policy's pods:
	// NotReady (the Ready condition is not True), or TwoPlanes (also a
	// node the API still has Ready that rebound marked
	// rebound.dev/unreachable, being dead on both its Lease and the
	// agents' gossip; maxUnavailableTime then counts from that detection).
	// TwoPlanes needs the controller's --lease-plane and agents that
	// gossip; without them it acts as NotReady. Targets, limits, holds
	// and fencing apply alike.
	// +kubebuilder:default=NotReady
	// +optional
	Detection Detection `json:"detection,omitempty"`

	// Actions rebound may take, in order of preference, each at most once.
	// +kubebuilder:default={"DeleteAndReplace","ScaleBounce"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b == a))",message="spec.actions must not repeat an action: list each of DeleteAndReplace, ScaleBounce at most once"
	// +listType=atomic
	// +optional
	Actions []RescueAction `json:"actions,omitempty"`

	// Fencing for pods with identity or exclusive storage.
	// +kubebuilder:default={}
	// +optional
	Fencing FencingPolicy `json:"fencing,omitempty"`

	// Limits bound how many actions rebound takes.
	// +kubebuilder:default={}
	// +optional
	Limits Limits `json:"limits,omitempty"`

	// DryRun plans and reports, but changes nothing.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// Suspend stops all actions of this policy (reporting goes on).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// CriticalSelector selects pods. A pod matches when it matches every
// selector that is set; unset (nil or empty) selectors match everything, so
// at least one must select something.
// +kubebuilder:validation:XValidation:rule="(has(self.namespaces) && size(self.namespaces) > 0) || (has(self.priorityClassNames) && size(self.priorityClassNames) > 0) || (has(self.namespaceSelector) && ((has(self.namespaceSelector.matchLabels) && size(self.namespaceSelector.matchLabels) > 0) || (has(self.namespaceSelector.matchExpressions) && size(self.namespaceSelector.matchExpressions) > 0))) || (has(self.podSelector) && ((has(self.podSelector.matchLabels) && size(self.podSelector.matchLabels) > 0) || (has(self.podSelector.matchExpressions) && size(self.podSelector.matchExpressions) > 0)))",message="spec.critical selects nothing: set at least one of namespaces, priorityClassNames, namespaceSelector or podSelector (a selector needs matchLabels or matchExpressions)"
type CriticalSelector struct {
	// Namespaces lists namespaces by name.
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector selects namespaces by label. Operators: In, NotIn,
	// Exists, DoesNotExist.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.critical.namespaceSelector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.critical.namespaceSelector.matchExpressions[].values must list at least one value when the operator is In or NotIn"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.critical.namespaceSelector.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist: remove the values"
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// PodSelector selects pods by label. Operators: In, NotIn, Exists,
	// DoesNotExist.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.critical.podSelector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.critical.podSelector.matchExpressions[].values must list at least one value when the operator is In or NotIn"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.critical.podSelector.matchExpressions[].values must be empty when the operator is Exists or DoesNotExist: remove the values"
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// PriorityClassNames lists the priority classes of critical pods, e.g.
	// system-cluster-critical.
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +optional
	PriorityClassNames []string `json:"priorityClassNames,omitempty"`
}

// FencingPolicy configures what counts as proof that a node is off.
type FencingPolicy struct {
	// Mode for pods with identity or exclusive storage.
	// +kubebuilder:default=OutOfServiceTaint
	// +optional
	Mode FencingMode `json:"mode,omitempty"`
}

// Limits bound rebound's actions, so that a mass failure never becomes an
// action storm. In Go, 0 means unset (Default fills it in).
type Limits struct {
	// MaxActionsPerMinute across the cluster for this policy, 1 to 1000.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxActionsPerMinute int32 `json:"maxActionsPerMinute,omitempty"`
	// MaxConcurrent rescues in flight (acted on, replacement not yet
	// available), 1 to 100.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`
}

// RecordedAction is an action as status.lastActions records it: the
// policy-level actions, plus ForceDelete, which rebound takes for stateful
// pods on fenced nodes whatever spec.actions says.
// +kubebuilder:validation:Enum=DeleteAndReplace;ScaleBounce;ForceDelete
type RecordedAction string

const (
	RecordedDeleteAndReplace RecordedAction = RecordedAction(DeleteAndReplace)
	RecordedScaleBounce      RecordedAction = RecordedAction(ScaleBounce)
	RecordedForceDelete      RecordedAction = "ForceDelete"
)

// ActionRecord is one action rebound took, kept in status for people.
type ActionRecord struct {
	// Time the action was taken.
	Time metav1.Time `json:"time"`
	// Action taken.
	Action RecordedAction `json:"action"`
	// Pod acted on, as namespace/name.
	// +kubebuilder:validation:MaxLength=317
	Pod string `json:"pod"`
	// Node the pod was stranded on.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Reason for the action, for people.
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
	// DryRun is true when the action was only planned.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// Result of the action, e.g. Succeeded, Failed, Pending.
	// +kubebuilder:validation:MaxLength=1024
	Result string `json:"result"`
}

// RecoveryPolicyStatus is what rebound observed and did.
type RecoveryPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the policy is valid and applied), Degraded
	// (critical pods are stranded and rebound cannot act on some).
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// StrandedPods counts critical pods on NotReady nodes that upstream
	// eviction will not move within maxUnavailableTime.
	// +optional
	StrandedPods int32 `json:"strandedPods"`
	// WaitingForFencing counts stranded pods rebound may not move until
	// their node is fenced.
	// +optional
	WaitingForFencing int32 `json:"waitingForFencing"`
	// RescuesTotal counts actions taken under this policy.
	// +optional
	RescuesTotal int64 `json:"rescuesTotal"`
	// LastActions are the most recent actions, newest first (at most 10).
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	LastActions []ActionRecord `json:"lastActions,omitempty"`
}

// RecoveryPolicy tells rebound which workloads are critical and how it may
// bring them back when their pods are stranded on NotReady nodes.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Stranded",type=integer,JSONPath=`.status.strandedPods`
// +kubebuilder:printcolumn:name="Rescues",type=integer,JSONPath=`.status.rescuesTotal`
// +kubebuilder:printcolumn:name="DryRun",type=boolean,JSONPath=`.spec.dryRun`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RecoveryPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RecoveryPolicySpec   `json:"spec"`
	Status RecoveryPolicyStatus `json:"status,omitempty"`
}

// RecoveryPolicyList is a list of RecoveryPolicy.
// +kubebuilder:object:root=true
type RecoveryPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RecoveryPolicy `json:"items"`
}
