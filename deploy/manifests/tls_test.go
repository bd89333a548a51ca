package manifests_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/deploy/manifests"
)

// certificate and issuer are the cert-manager.io/v1 fields the example uses: decoding is
// strict, so a misspelt or unexpected field fails the test.
type certificate struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		IsCA        bool     `json:"isCA"`
		CommonName  string   `json:"commonName"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		Usages      []string `json:"usages"`
		DNSNames    []string `json:"dnsNames"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type issuer struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

// relTo names the kustomization p relative to dir: kustomize takes no absolute paths to
// kustomizations.
func relTo(t *testing.T, dir, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err == nil {
		p, err = filepath.Rel(dir, abs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeKustomization writes dir/kustomization.yaml: resources, then components.
func writeKustomization(t *testing.T, dir string, resources, components []string, extra string) {
	t.Helper()
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
	for _, r := range resources {
		k += "  - " + relTo(t, dir, r) + "\n"
	}
	if len(components) > 0 {
		k += "components:\n"
		for _, c := range components {
			k += "  - " + relTo(t, dir, c) + "\n"
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k+extra), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTLSComponent: the component's files are keys of the mounted Secret latch-tls; it turns
// on --http-tls, so the pods --join https://latch:7402 (replacing the base's latch:7402 in
// place, nothing else), and probe and get scraped over HTTPS; and it composes with the
// five-node overlay as with the base.
func TestTLSComponent(t *testing.T) {
	dir := t.TempDir()
	writeKustomization(t, dir, []string{fiveDir}, []string{tlsCompDir}, "")
	for _, tc := range []struct {
		dir      string
		replicas int
	}{{tlsDir, 3}, {dir, 5}} {
		c := render(t, tc.dir)
		if c.replicas() != tc.replicas {
			t.Errorf("%s: replicas %d, want %d", tc.dir, c.replicas(), tc.replicas)
		}
		ct := c.latchContainer(t)
		if !slices.Equal(ct.Args, tlsArgs) {
			t.Errorf("%s: args\n got %q\nwant %q", tc.dir, ct.Args, tlsArgs)
		}
		if ct.Args[joinIndex-1] != "--join" || ct.Args[joinIndex] != "https://latch:7402" {
			t.Errorf("%s: args %d, %d are %q %q, want --join https://latch:7402", tc.dir, joinIndex-1, joinIndex, ct.Args[joinIndex-1], ct.Args[joinIndex])
		}
		_, f := flags(t, ct.Args)
		for flag, key := range map[string]string{"tls-cert": "tls.crt", "tls-key": "tls.key", "tls-ca": "ca.crt"} {
			checkSecretFile(t, c, flag, f[flag], tlsSecret, key)
		}
		checkArgs(t, c, true)
		checkPod(t, c, true)
	}
}

// TestTLSComponentJoinGuard: the component replaces --join's value by its index; over a base
// whose args have moved, its JSON patch test ops fail the build instead of replacing
// another arg.
func TestTLSComponentJoinGuard(t *testing.T) {
	root := t.TempDir()
	moved := filepath.Join(root, "moved")
	if err := os.Mkdir(moved, 0o755); err != nil {
		t.Fatal(err)
	}
	writeKustomization(t, moved, []string{baseDir}, nil, `patches:
  - target:
      kind: StatefulSet
      name: latch
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/1
        value: --pprof
`)
	c := render(t, moved)
	if args := c.latchContainer(t).Args; args[joinIndex] == "latch:7402" {
		t.Fatalf("the moved base still has latch:7402 at %d: %q", joinIndex, args)
	}
	writeKustomization(t, root, []string{moved}, []string{tlsCompDir}, "")
	objs, err := manifests.Render(root)
	if err == nil {
		args, _ := manifests.PodArgs(root)
		t.Fatalf("the tls component over moved args rendered %d objects, args %q; want a failed build", len(objs), args)
	}
	if !strings.Contains(err.Error(), "/spec/template/spec/containers/0/args/") {
		t.Errorf("the build fails, but not on the args' test op: %v", err)
	}
}

// TestCertManager: the example issues latch-tls from a CA of its own, for every name that
// peers and clients dial, usable both ways; a certificate with exactly those names and
// usages verifies as crypto/tls would check it.
func TestCertManager(t *testing.T) {
	c := render(t, certMgrDir)
	if c.sts != nil || len(c.services) > 0 {
		t.Error("the cert-manager example deploys no cluster of its own")
	}
	leaf := c.certs[tlsSecret]
	if leaf == nil {
		t.Fatalf("no Certificate %s", tlsSecret)
	}
	ns := leaf.Metadata.Namespace
	if ns == "" {
		t.Fatal("Certificate latch-tls has no namespace: its DNS names need one")
	}
	if leaf.Spec.SecretName != tlsSecret {
		t.Errorf("Certificate %s writes Secret %s, want %s (the tls component mounts it)", leaf.Metadata.Name, leaf.Spec.SecretName, tlsSecret)
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(leaf.Spec.Usages, u) {
			t.Errorf("Certificate %s usages %v lack %q: a node presents it as server and as client", tlsSecret, leaf.Spec.Usages, u)
		}
	}
	checkLifetime(t, leaf)

	// The chain: latch-tls <- CA Issuer <- CA Certificate <- self-signed Issuer.
	caIss := c.issuers[leaf.Spec.IssuerRef.Name]
	if leaf.Spec.IssuerRef.Kind != "Issuer" || caIss == nil || caIss.Spec.CA == nil {
		t.Fatalf("Certificate %s: issuerRef %+v is not a CA Issuer of the example", tlsSecret, leaf.Spec.IssuerRef)
	}
	var ca *certificate
	for _, cert := range c.certs {
		if cert.Spec.SecretName == caIss.Spec.CA.SecretName {
			ca = cert
		}
	}
	if ca == nil || !ca.Spec.IsCA {
		t.Fatalf("Issuer %s: Secret %s comes from no CA Certificate of the example", caIss.Metadata.Name, caIss.Spec.CA.SecretName)
	}
	if root := c.issuers[ca.Spec.IssuerRef.Name]; root == nil || root.Spec.SelfSigned == nil {
		t.Errorf("CA Certificate %s: issuerRef %s is not the self-signed Issuer", ca.Metadata.Name, ca.Spec.IssuerRef.Name)
	}
	for _, o := range c.objects {
		if o.Namespace != ns {
			t.Errorf("%s %s in namespace %q, the Certificate in %q: Issuers are namespaced", o.Kind, o.Name, o.Namespace, ns)
		}
	}

	// Names: every peer of the largest cluster as the peers dial it, and the client Service
	// as the TLS pods --join it (https://latch:7402: the certificate must name latch).
	args, err := manifests.PodArgs(fiveDir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := manifests.Replicas(fiveDir)
	if err != nil {
		t.Fatal(err)
	}
	_, f := flags(t, args)
	var hosts []string
	for i := range n {
		adv := manifests.ExpandArgs([]string{f["advertise"]}, map[string]string{"POD_NAME": "latch-" + strconv.Itoa(i)})[0]
		h, _ := hostPort(t, "advertise", adv)
		hosts = append(hosts, h, h+"."+ns+".svc", h+"."+ns+".svc.cluster.local")
	}
	for _, m := range strings.Split(f["initial-cluster"], ",") {
		_, addr, _ := strings.Cut(m, "=")
		h, _ := hostPort(t, "initial-cluster", addr)
		hosts = append(hosts, h)
	}
	tlsPodArgs, err := manifests.PodArgs(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	_, tf := flags(t, tlsPodArgs)
	scheme, join, _ := joinAddr(t, tf["join"])
	if scheme != "https" || join != "latch" {
		t.Errorf("the TLS pods --join %s, want https://latch:PORT", tf["join"])
	}
	hosts = append(hosts, join, join+"."+ns+".svc", join+"."+ns+".svc.cluster.local")
	verifyNames(t, leaf, hosts)
}

// TestCertManagerNamespace: the DNS names follow the kustomization's namespace.
func TestCertManagerNamespace(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"kustomization.yaml", "issuers.yaml", "certificate.yaml"} {
		b, err := os.ReadFile(filepath.Join(certMgrDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "kustomization.yaml" {
			if !strings.Contains(string(b), "\nnamespace: latch\n") {
				t.Fatal("kustomization.yaml has no line `namespace: latch`")
			}
			b = []byte(strings.Replace(string(b), "\nnamespace: latch\n", "\nnamespace: locks-prod\n", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := render(t, dir)
	want := []string{"latch", "latch.locks-prod.svc", "latch.locks-prod.svc.cluster.local",
		"*.latch-peers", "*.latch-peers.locks-prod.svc", "*.latch-peers.locks-prod.svc.cluster.local"}
	if got := c.certs[tlsSecret].Spec.DNSNames; !slices.Equal(got, want) {
		t.Errorf("dnsNames %q, want %q", got, want)
	}
}

// checkLifetime: renewal comes before expiry.
func checkLifetime(t *testing.T, c *certificate) {
	t.Helper()
	d, err1 := time.ParseDuration(c.Spec.Duration)
	r, err2 := time.ParseDuration(c.Spec.RenewBefore)
	if err1 != nil || err2 != nil || r <= 0 || r >= d {
		t.Errorf("Certificate %s duration %q renewBefore %q: want 0 < renewBefore < duration", c.Metadata.Name, c.Spec.Duration, c.Spec.RenewBefore)
	}
}

// verifyNames issues a certificate with c's DNS names and usages from a throwaway CA and
// verifies it for each host as a server, and as a client.
func verifyNames(t *testing.T, c *certificate, hosts []string) {
	t.Helper()
	usage := map[string]x509.ExtKeyUsage{"server auth": x509.ExtKeyUsageServerAuth, "client auth": x509.ExtKeyUsageClientAuth}
	var eku []x509.ExtKeyUsage
	for _, u := range c.Spec.Usages {
		if e, ok := usage[u]; ok {
			eku = append(eku, e)
		}
	}
	ca := clustertest.NewCA(t, "latch test CA")
	cert := ca.IssueFor(t, "latch", c.Spec.DNSNames, nil, eku...).Leaf
	roots := ca.Pool
	for _, h := range hosts {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("as server for %s: %v", h, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("as client: %v", err)
	}
}
