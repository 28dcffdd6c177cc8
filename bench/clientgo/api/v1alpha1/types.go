package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The fields follow crds/tkm.io_tritonkernelcaches.yaml.

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TritonKernelCache declares a Triton kernel cache image for a namespace.
type TritonKernelCache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TritonKernelCacheSpec   `json:"spec"`
	Status TritonKernelCacheStatus `json:"status,omitempty"`
}

// TritonKernelCacheSpec is the desired state.
type TritonKernelCacheSpec struct {
	CacheImage       string                 `json:"cacheImage"`
	SignaturePolicy  *SignaturePolicy       `json:"signaturePolicy,omitempty"`
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`
	MountPath        string                 `json:"mountPath,omitempty"`
}

// SignaturePolicy says how the image's signature is verified.
type SignaturePolicy struct {
	Mode               string             `json:"mode,omitempty"`
	PublicKey          string             `json:"publicKey,omitempty"`
	PublicKeySecretRef *SecretKeySelector `json:"publicKeySecretRef,omitempty"`
}

// SecretKeySelector names a key of a Secret in the same namespace.
type SecretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	Name string `json:"name"`
}

// TritonKernelCacheStatus is the observed state.
type TritonKernelCacheStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	ResolvedDigest     string             `json:"resolvedDigest,omitempty"`
	Summary            *CacheSummary      `json:"summary,omitempty"`
	Counts             *NodeCounts        `json:"counts,omitempty"`
	FailedNodes        []FailedNode       `json:"failedNodes,omitempty"`
	LastUpdated        *metav1.Time       `json:"lastUpdated,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// CacheSummary describes the cache image's content.
type CacheSummary struct {
	EntryCount     int64         `json:"entryCount,omitempty"`
	CacheSizeBytes int64         `json:"cacheSizeBytes,omitempty"`
	Targets        []CacheTarget `json:"targets,omitempty"`
}

// CacheTarget is one compile target found in the cache.
type CacheTarget struct {
	Backend       string `json:"backend,omitempty"`
	Arch          string `json:"arch,omitempty"`
	WarpSize      int32  `json:"warpSize,omitempty"`
	TritonVersion string `json:"tritonVersion,omitempty"`
	PTXVersion    string `json:"ptxVersion,omitempty"`
}

// NodeCounts sums the per-node states.
type NodeCounts struct {
	Nodes        int32 `json:"nodes"`
	Compatible   int32 `json:"compatible"`
	Incompatible int32 `json:"incompatible"`
	Failed       int32 `json:"failed"`
	InUse        int32 `json:"inUse"`
}

// FailedNode names a node where the cache failed, and why.
type FailedNode struct {
	Node    string `json:"node"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TritonKernelCacheList is a list of TritonKernelCaches.
type TritonKernelCacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TritonKernelCache `json:"items"`
}
