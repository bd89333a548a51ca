// Package manifests renders the Kubernetes manifests under deploy/k8s the way
// `kubectl apply -k` does (kustomize's krusty, from disk) and reads back what the latch pods
// run, so tests can check the manifests and start real latch processes with exactly the pod
// args. It is part of the deploy module only: the main module never depends on Kubernetes.
package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Names the manifests give the StatefulSet and its latch container.
const (
	StatefulSet = "latch"
	Container   = "latch"
)

// ErrNotFound is returned when a rendered kustomization has no StatefulSet latch with a
// container latch.
var ErrNotFound = errors.New("manifests: no StatefulSet latch with a container latch")

// Object is one rendered object.
type Object struct {
	APIVersion, Kind, Namespace, Name string
	// JSON is the whole object, for decoding into its typed API struct.
	JSON []byte
}

// Render builds the kustomization in dir (a path on disk, e.g. "../k8s/overlays/five") and
// returns its objects in kustomize's output order.
func Render(dir string) ([]Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("manifests: kustomize build %s: %w", dir, err)
	}
	var out []Object
	for _, r := range rm.Resources() {
		js, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("manifests: %s %s: %w", r.GetKind(), r.GetName(), err)
		}
		out = append(out, Object{APIVersion: r.GetApiVersion(), Kind: r.GetKind(),
			Namespace: r.GetNamespace(), Name: r.GetName(), JSON: js})
	}
	return out, nil
}

// podSpec is the part of the StatefulSet that PodArgs and Replicas read.
type podSpec struct {
	Spec struct {
		Replicas *int `json:"replicas"`
		Template struct {
			Spec struct {
				Containers []struct {
					Name string   `json:"name"`
					Args []string `json:"args"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// statefulSet renders dir and decodes the StatefulSet latch.
func statefulSet(dir string) (podSpec, error) {
	var s podSpec
	objs, err := Render(dir)
	if err != nil {
		return s, err
	}
	for _, o := range objs {
		if o.APIVersion == "apps/v1" && o.Kind == "StatefulSet" && o.Name == StatefulSet {
			err := json.Unmarshal(o.JSON, &s)
			return s, err
		}
	}
	return s, ErrNotFound
}

// PodArgs returns the args of the latch container of the StatefulSet latch that the
// kustomization in dir renders, unexpanded: they hold $(POD_NAME) (see ExpandArgs).
func PodArgs(dir string) ([]string, error) {
	s, err := statefulSet(dir)
	if err != nil {
		return nil, err
	}
	for _, c := range s.Spec.Template.Spec.Containers {
		if c.Name == Container {
			return c.Args, nil
		}
	}
	return nil, ErrNotFound
}

// Replicas returns the replica count of the StatefulSet latch that the kustomization in dir
// renders (1 when it names none, as Kubernetes defaults it).
func Replicas(dir string) (int, error) {
	s, err := statefulSet(dir)
	if err != nil {
		return 0, err
	}
	if s.Spec.Replicas == nil {
		return 1, nil
	}
	return *s.Spec.Replicas, nil
}

// ExpandArgs replaces $(NAME) in args with vars[NAME] as the kubelet does: a name missing from
// vars stays as written, and $$ is a literal $.
func ExpandArgs(args []string, vars map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, vars)
	}
	return out
}

func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
