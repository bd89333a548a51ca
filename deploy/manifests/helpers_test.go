package manifests_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"

	"github.com/latchd/latch/deploy/manifests"
)

// The kustomizations under test, relative to this package.
const (
	baseDir         = "../k8s/base"
	threeDir        = "../k8s/overlays/three"
	fiveDir         = "../k8s/overlays/five"
	tlsDir          = "../k8s/examples/tls"
	certMgrDir      = "../k8s/examples/cert-manager"
	tlsCompDir      = "../k8s/components/tls"
	secretName      = "latch-secret" // deploy spec: Secret latch-secret, key secret (clients)
	peerSecretName  = "latch-peer-secret"
	adminSecretName = "latch-admin-secret"
	secretKey       = "secret"
	tlsSecret       = "latch-tls" // deploy spec: tls.crt, tls.key, ca.crt
	latchImage      = "ghcr.io/latchd/latch"
	runtimeUser     = 65532
)

// cluster is one rendered latch kustomization, every object decoded strictly into its type.
type cluster struct {
	sts      *appsv1.StatefulSet
	services map[string]*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
	certs    map[string]*certificate
	issuers  map[string]*issuer
	objects  []manifests.Object
}

// render builds dir and decodes every object into the API struct of its kind, rejecting
// unknown and duplicate fields (as the API server's strict field validation does).
func render(t *testing.T, dir string) *cluster {
	t.Helper()
	objs, err := manifests.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, dir, objs)
}

func decodeAll(t *testing.T, dir string, objs []manifests.Object) *cluster {
	t.Helper()
	c := &cluster{services: map[string]*corev1.Service{}, certs: map[string]*certificate{},
		issuers: map[string]*issuer{}, objects: objs}
	for _, o := range objs {
		what := fmt.Sprintf("%s: %s %s %s", dir, o.APIVersion, o.Kind, o.Name)
		switch o.APIVersion + " " + o.Kind {
		case "apps/v1 StatefulSet":
			if c.sts != nil {
				t.Errorf("%s: a second StatefulSet", what)
			}
			c.sts = strict[appsv1.StatefulSet](t, what, o.JSON)
		case "v1 Service":
			c.services[o.Name] = strict[corev1.Service](t, what, o.JSON)
		case "policy/v1 PodDisruptionBudget":
			c.pdbs = append(c.pdbs, strict[policyv1.PodDisruptionBudget](t, what, o.JSON))
		case "cert-manager.io/v1 Certificate":
			c.certs[o.Name] = strict[certificate](t, what, o.JSON)
		case "cert-manager.io/v1 Issuer":
			c.issuers[o.Name] = strict[issuer](t, what, o.JSON)
		default:
			t.Errorf("%s: no test knows this kind", what)
		}
	}
	return c
}

// strict decodes js into a new T, failing t on unknown or duplicate fields.
func strict[T any](t *testing.T, what string, js []byte) *T {
	t.Helper()
	v := new(T)
	strictErrs, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, e := range strictErrs {
		t.Errorf("%s: %v", what, e)
	}
	return v
}

// latchContainer is the StatefulSet's container latch.
func (c *cluster) latchContainer(t *testing.T) *corev1.Container {
	t.Helper()
	if c.sts == nil {
		t.Fatal("no StatefulSet rendered")
	}
	for i := range c.sts.Spec.Template.Spec.Containers {
		if ct := &c.sts.Spec.Template.Spec.Containers[i]; ct.Name == manifests.Container {
			return ct
		}
	}
	t.Fatalf("StatefulSet %s has no container %s", c.sts.Name, manifests.Container)
	return nil
}

// replicas is the StatefulSet's replica count (Kubernetes defaults a missing one to 1).
func (c *cluster) replicas() int {
	if c.sts.Spec.Replicas == nil {
		return 1
	}
	return int(*c.sts.Spec.Replicas)
}

// podNames are the pods the StatefulSet runs: NAME-0 .. NAME-(replicas-1).
func (c *cluster) podNames() map[string]bool {
	out := map[string]bool{}
	for i := range c.replicas() {
		out[c.sts.Name+"-"+strconv.Itoa(i)] = true
	}
	return out
}

// headless is the Service named by the StatefulSet's serviceName.
func (c *cluster) headless(t *testing.T) *corev1.Service {
	t.Helper()
	svc := c.services[c.sts.Spec.ServiceName]
	if svc == nil {
		t.Fatalf("serviceName %q names no rendered Service", c.sts.Spec.ServiceName)
	}
	return svc
}

// containerPort resolves a probe or Service target port (a name or a number) on ct.
func containerPort(t *testing.T, ct *corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	for _, cp := range ct.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port %s", ct.Name, p.String())
	return 0
}

// namedPort is ct's container port called name.
func namedPort(t *testing.T, ct *corev1.Container, name string) int {
	t.Helper()
	return containerPort(t, ct, intstr.FromString(name))
}

// servicePort is svc's port called name.
func servicePort(t *testing.T, svc *corev1.Service, name string) corev1.ServicePort {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("Service %s has no port %s", svc.Name, name)
	return corev1.ServicePort{}
}

// boolFlags are the server's boolean flags: given alone, they take no value.
var boolFlags = map[string]bool{"http-tls": true, "bootstrap": true, "insecure": true, "pprof": true}

// flags parses latch's "VERB --flag value ..." args into the verb and a map (a boolean flag,
// given alone, maps to "true"), failing t on a repeated flag, a stray word, a flag without
// its value or a boolean flag with one (urfave/cli would take it for a positional arg).
func flags(t *testing.T, args []string) (string, map[string]string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("no args")
	}
	out := map[string]string{}
	rest := args[1:]
	for len(rest) > 0 {
		name, ok := strings.CutPrefix(rest[0], "--")
		if !ok || name == "" || strings.Contains(name, "=") {
			t.Fatalf("args %q: %q is not a --flag", args, rest[0])
		}
		if _, dup := out[name]; dup {
			t.Fatalf("args %q: --%s twice", args, name)
		}
		if boolFlags[name] {
			out[name] = "true"
			rest = rest[1:]
			continue
		}
		if len(rest) < 2 || strings.HasPrefix(rest[1], "--") {
			t.Fatalf("args %q: --%s has no value", args, name)
		}
		out[name] = rest[1]
		rest = rest[2:]
	}
	return args[0], out
}

// joinAddr splits a --join value, host:port (plain HTTP) or https://host:port, into its
// scheme ("http" for the bare form), host and port, failing t on any other form.
func joinAddr(t *testing.T, v string) (scheme, host string, port int) {
	t.Helper()
	scheme, rest := "http", v
	if r, ok := strings.CutPrefix(v, "https://"); ok {
		scheme, rest = "https", r
	}
	if strings.Contains(rest, "/") {
		t.Fatalf("--join %q: want host:port or https://host:port, no other scheme or path", v)
	}
	host, port = hostPort(t, "join", rest)
	return scheme, host, port
}

// hostPort splits a host:port flag value, failing t on a bad one.
func hostPort(t *testing.T, flag, v string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(v)
	if err != nil {
		t.Fatalf("--%s %q: %v", flag, v, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("--%s %q: port: %v", flag, v, err)
	}
	return h, n
}
