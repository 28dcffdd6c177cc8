package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is tkm.io/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: "tkm.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds tkm.io/v1alpha1 to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &TritonKernelCache{}, &TritonKernelCacheList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
