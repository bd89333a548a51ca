package manifests_test

import (
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// specArgs are the pod args of the deploy spec ("Kubernetes layout"), word for word.
var specArgs = []string{
	"server", "--mode", "cluster", "--id", "$(POD_NAME)", "--data-dir", "/data",
	"--listen", "0.0.0.0:7400", "--http", "0.0.0.0:7402", "--raft-addr", "0.0.0.0:7401",
	"--advertise", "$(POD_NAME).latch-peers:7401",
	"--initial-cluster", "latch-0=latch-0.latch-peers:7401,latch-1=latch-1.latch-peers:7401,latch-2=latch-2.latch-peers:7401",
	"--join", "latch:7402",
	"--secret-file", "/etc/latch/secret/secret",
	"--peer-secret-file", "/etc/latch/peer-secret/secret",
	"--admin-secret-file", "/etc/latch/admin-secret/secret", "--log-format", "json",
}

// joinIndex is where specArgs hold the value of --join: the tls component replaces it there.
const joinIndex = 18

// tlsArgs are the pod args with the tls component: specArgs with --join https://latch:7402
// (in place), then its TLS files and --http-tls.
var tlsArgs = func() []string {
	a := append([]string{}, specArgs...)
	if a[joinIndex-1] != "--join" || a[joinIndex] != "latch:7402" {
		panic("specArgs: --join latch:7402 moved; update joinIndex (and the tls component's patch)")
	}
	a[joinIndex] = "https://latch:7402"
	return append(a, "--tls-cert", "/etc/latch/tls/tls.crt", "--tls-key", "/etc/latch/tls/tls.key",
		"--tls-ca", "/etc/latch/tls/ca.crt", "--http-tls")
}()

// TestClusters checks every kustomization that deploys a latch cluster for what its pods need
// to form, join and serve a cluster.
func TestClusters(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		replicas int
		args     []string
		httpTLS  bool // --http port on TLS: HTTPS probes and scrapes, an https:// --join
	}{
		{baseDir, 3, specArgs, false},
		{threeDir, 3, specArgs, false},
		{fiveDir, 5, specArgs, false},
		{tlsDir, 3, tlsArgs, true},
	} {
		t.Run(path.Base(tc.dir), func(t *testing.T) {
			c := render(t, tc.dir)
			if c.sts == nil {
				t.Fatal("no StatefulSet")
			}
			if got := c.replicas(); got != tc.replicas {
				t.Errorf("replicas %d, want %d", got, tc.replicas)
			}
			ct := c.latchContainer(t)
			if !reflect.DeepEqual(ct.Args, tc.args) {
				t.Errorf("args\n got %q\nwant %q", ct.Args, tc.args)
			}
			checkStatefulSet(t, c)
			checkServices(t, c)
			checkArgs(t, c, tc.httpTLS)
			checkPod(t, c, tc.httpTLS)
			checkPDB(t, c)
			for _, o := range c.objects {
				if o.Kind == "Secret" {
					t.Errorf("renders Secret %s: secrets are created by hand, never kept here", o.Name)
				}
			}
		})
	}
}

// TestThreeIsBase: the overlay three is the base as it is.
func TestThreeIsBase(t *testing.T) {
	a, b := render(t, baseDir), render(t, threeDir)
	if !reflect.DeepEqual(a.objects, b.objects) {
		t.Error("overlays/three renders differently from base")
	}
}

func checkStatefulSet(t *testing.T, c *cluster) {
	t.Helper()
	s := c.sts
	if s.Name != "latch" {
		t.Errorf("StatefulSet %s, want latch", s.Name)
	}
	if s.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q: the initial members must start together", s.Spec.PodManagementPolicy)
	}
	if s.Spec.UpdateStrategy.Type != "RollingUpdate" {
		t.Errorf("updateStrategy %q, want RollingUpdate", s.Spec.UpdateStrategy.Type)
	}
	sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v (%v)", s.Spec.Selector, s.Spec.Template.Labels, err)
	}
	if len(s.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volumeClaimTemplates, want 1 (data)", len(s.Spec.VolumeClaimTemplates))
	}
	pvc := s.Spec.VolumeClaimTemplates[0]
	if pvc.Name != "data" || !reflect.DeepEqual(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("volumeClaimTemplate %s %v, want data [ReadWriteOnce]", pvc.Name, pvc.Spec.AccessModes)
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("data volume %s, want 1Gi", q.String())
	}
}

func checkServices(t *testing.T, c *cluster) {
	t.Helper()
	ct := c.latchContainer(t)
	pod := labels.Set(c.sts.Spec.Template.Labels)
	if len(c.services) != 2 {
		t.Errorf("%d Services, want 2 (latch, latch-peers)", len(c.services))
	}
	for _, svc := range c.services {
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if len(svc.Spec.Selector) == 0 || !sel.Matches(pod) {
			t.Errorf("Service %s selector %v does not match the pod labels %v", svc.Name, svc.Spec.Selector, pod)
		}
		for _, p := range svc.Spec.Ports {
			if got := containerPort(t, ct, p.TargetPort); got != int(p.Port) {
				t.Errorf("Service %s port %s: %d -> container port %d: keep them equal", svc.Name, p.Name, p.Port, got)
			}
		}
	}
	peers := c.headless(t)
	if peers.Name != "latch-peers" || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s clusterIP %q publishNotReadyAddresses %v: want latch-peers, None, true (peers resolve before they are ready)",
			peers.Name, peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses)
	}
	if p := servicePort(t, peers, "peer"); int(p.Port) != namedPort(t, ct, "peer") {
		t.Errorf("Service %s port peer %d, container %d", peers.Name, p.Port, namedPort(t, ct, "peer"))
	}
	client := c.services["latch"]
	if client == nil {
		t.Fatal("no client Service latch")
	}
	if client.Spec.ClusterIP == corev1.ClusterIPNone || client.Spec.PublishNotReadyAddresses {
		t.Error("client Service latch must be a ClusterIP Service of ready pods only")
	}
	for name, want := range map[string]int{"client": 7400, "http": 7402} {
		if p := servicePort(t, client, name); int(p.Port) != want {
			t.Errorf("Service latch port %s %d, want %d", name, p.Port, want)
		}
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkArgs checks the pod args; httpTLS: the --http port serves TLS (the tls component).
func checkArgs(t *testing.T, c *cluster, httpTLS bool) {
	t.Helper()
	ct := c.latchContainer(t)
	verb, f := flags(t, ct.Args)
	if verb != "server" || f["mode"] != "cluster" {
		t.Errorf("args start %s --mode %s, want server --mode cluster", verb, f["mode"])
	}
	// --http-tls serves the node's certificate, and verifies client certificates (and an
	// https:// --join's server) against the cluster CA.
	if got := f["http-tls"] == "true"; got != httpTLS {
		t.Errorf("--http-tls given: %v, want %v", got, httpTLS)
	}
	if httpTLS {
		for _, flag := range []string{"tls-cert", "tls-key", "tls-ca"} {
			if f[flag] == "" {
				t.Errorf("--http-tls without --%s", flag)
			}
		}
	}
	// Every $(VAR) must be an env var of the container, or the kubelet leaves it as written.
	env := map[string]corev1.EnvVar{}
	for _, e := range ct.Env {
		env[e.Name] = e
	}
	for _, a := range ct.Args {
		for _, m := range varRef.FindAllStringSubmatch(a, -1) {
			if _, ok := env[m[1]]; !ok {
				t.Errorf("arg %q uses $(%s), which the container's env does not define", a, m[1])
			}
		}
	}
	for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("env %s must come from the downward API field %s", name, field)
		}
	}
	if f["id"] != "$(POD_NAME)" {
		t.Errorf("--id %q, want $(POD_NAME): the ids are the pod names", f["id"])
	}

	// The listen addresses use the container ports.
	for flag, port := range map[string]string{"listen": "client", "http": "http", "raft-addr": "peer"} {
		if h, p := hostPort(t, flag, f[flag]); h != "0.0.0.0" || p != namedPort(t, ct, port) {
			t.Errorf("--%s %s: want 0.0.0.0 and the container port %s (%d)", flag, f[flag], port, namedPort(t, ct, port))
		}
	}

	// Peers dial POD.HEADLESS:PEERPORT: the advertised address and every initial member.
	peers, peerPort := c.headless(t).Name, namedPort(t, ct, "peer")
	if want := "$(POD_NAME)." + peers + ":" + strconv.Itoa(peerPort); f["advertise"] != want {
		t.Errorf("--advertise %q, want %q", f["advertise"], want)
	}
	members := map[string]bool{}
	for _, m := range strings.Split(f["initial-cluster"], ",") {
		id, addr, ok := strings.Cut(m, "=")
		if !ok {
			t.Fatalf("--initial-cluster member %q is not ID=ADDR", m)
		}
		if members[id] {
			t.Errorf("--initial-cluster lists %s twice", id)
		}
		members[id] = true
		if want := id + "." + peers + ":" + strconv.Itoa(peerPort); addr != want {
			t.Errorf("--initial-cluster %s=%s, want %s (its --advertise)", id, addr, want)
		}
	}
	// The initial members are the first three pods, which exist at every size.
	if want := (map[string]bool{"latch-0": true, "latch-1": true, "latch-2": true}); !reflect.DeepEqual(members, want) {
		t.Errorf("--initial-cluster members %v, want latch-0..2", members)
	}
	pods := c.podNames()
	for id := range members {
		if !pods[id] {
			t.Errorf("--initial-cluster names %s, which %d replicas do not run", id, c.replicas())
		}
	}

	// Joining nodes ask the client Service's http port, over TLS when it serves TLS: a plain
	// request to a TLS port gets 400, and a join never succeeds.
	client := c.services["latch"]
	scheme, h, p := joinAddr(t, f["join"])
	if client == nil || h != client.Name || p != int(servicePort(t, client, "http").Port) {
		t.Errorf("--join %s: want the client Service latch and its http port", f["join"])
	}
	if want := map[bool]string{false: "http", true: "https"}[httpTLS]; scheme != want {
		t.Errorf("--join %s: scheme %s, want %s (--http-tls %v)", f["join"], scheme, want, httpTLS)
	}

	// --data-dir is the persistent volume; each secret file a key of its own mounted Secret:
	// three principals, three Secrets, none mounted twice.
	if mountOf(t, ct, f["data-dir"]).Name != c.sts.Spec.VolumeClaimTemplates[0].Name || f["data-dir"] != mountOf(t, ct, f["data-dir"]).MountPath {
		t.Errorf("--data-dir %s is not the mount path of the volumeClaimTemplate", f["data-dir"])
	}
	secrets := map[string]string{"secret-file": secretName, "peer-secret-file": peerSecretName, "admin-secret-file": adminSecretName}
	mounts := map[string]bool{}
	for flag, secret := range secrets {
		checkSecretFile(t, c, flag, f[flag], secret, secretKey)
		mounts[mountOf(t, ct, f[flag]).Name] = true
	}
	if len(mounts) != len(secrets) {
		t.Errorf("the secret files %q, %q and %q share a mount: each principal needs a Secret of its own",
			f["secret-file"], f["peer-secret-file"], f["admin-secret-file"])
	}
}

// mountOf is the volume mount of ct that holds file (the longest mount path that contains it).
func mountOf(t *testing.T, ct *corev1.Container, file string) corev1.VolumeMount {
	t.Helper()
	var best corev1.VolumeMount
	for _, m := range ct.VolumeMounts {
		if (file == m.MountPath || strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best.MountPath) {
			best = m
		}
	}
	if best.Name == "" {
		t.Fatalf("%s is on no mounted volume (the root filesystem is read-only)", file)
	}
	return best
}

// checkSecretFile: file is key of Secret secret, mounted read-only.
func checkSecretFile(t *testing.T, c *cluster, flag, file, secret, key string) {
	t.Helper()
	ct := c.latchContainer(t)
	m := mountOf(t, ct, file)
	var vol *corev1.Volume
	for i, v := range c.sts.Spec.Template.Spec.Volumes {
		if v.Name == m.Name {
			vol = &c.sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret {
		t.Errorf("--%s %s: its volume %s is not the Secret %s", flag, file, m.Name, secret)
		return
	}
	if !m.ReadOnly {
		t.Errorf("Secret %s is mounted writable", secret)
	}
	if len(vol.Secret.Items) > 0 {
		t.Errorf("Secret %s: items remap the keys; the files must be named as the keys", secret)
	}
	if rel := strings.TrimPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/"); rel != key {
		t.Errorf("--%s %s: names file %q of Secret %s, want its key %q", flag, file, rel, secret, key)
	}
	// The files must be readable by the runtime user, who is not root: fsGroup owns them.
	if vol.Secret.DefaultMode == nil || *vol.Secret.DefaultMode&0o040 == 0 || *vol.Secret.DefaultMode&0o007 != 0 {
		t.Errorf("Secret %s defaultMode %v: want group-readable (fsGroup %d) and nothing for others", secret, vol.Secret.DefaultMode, runtimeUser)
	}
}

// checkPod checks the pod template; httpTLS: the --http port serves TLS (the tls component),
// so the probes and the scrape use HTTPS.
func checkPod(t *testing.T, c *cluster, httpTLS bool) {
	t.Helper()
	ps := c.sts.Spec.Template.Spec
	ct := c.latchContainer(t)
	httpPort := namedPort(t, ct, "http")
	scheme := corev1.URISchemeHTTP
	if httpTLS {
		scheme = corev1.URISchemeHTTPS
	}

	if !strings.HasPrefix(ct.Image, latchImage+":") {
		t.Errorf("image %s, want %s:TAG", ct.Image, latchImage)
	}
	for _, p := range []struct {
		name string
		pr   *corev1.Probe
		path string
	}{{"livenessProbe", ct.LivenessProbe, "/healthz"}, {"readinessProbe", ct.ReadinessProbe, "/readyz"}, {"startupProbe", ct.StartupProbe, "/healthz"}} {
		if p.pr == nil || p.pr.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", p.name)
			continue
		}
		g := p.pr.HTTPGet
		got := g.Scheme
		if got == "" {
			got = corev1.URISchemeHTTP // the API's default
		}
		if g.Path != p.path || containerPort(t, ct, g.Port) != httpPort || got != scheme {
			t.Errorf("%s %s %s on %s, want %s %s on the http port", p.name, got, g.Path, g.Port.String(), scheme, p.path)
		}
	}
	if ct.LivenessProbe != nil && (ct.LivenessProbe.PeriodSeconds != 10 || ct.LivenessProbe.FailureThreshold != 6) {
		t.Errorf("livenessProbe every %ds, %d failures: want 10s, 6", ct.LivenessProbe.PeriodSeconds, ct.LivenessProbe.FailureThreshold)
	}
	if ct.ReadinessProbe != nil && (ct.ReadinessProbe.PeriodSeconds != 5 || ct.ReadinessProbe.FailureThreshold != 2) {
		t.Errorf("readinessProbe every %ds, %d failures: want 5s, 2", ct.ReadinessProbe.PeriodSeconds, ct.ReadinessProbe.FailureThreshold)
	}

	a := c.sts.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(httpPort) || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("prometheus annotations %v: want scrape true, port %d, path /metrics", a, httpPort)
	}
	// The usual kubernetes-pods scrape config takes __scheme__ from prometheus.io/scheme
	// (default http).
	if v, ok := a["prometheus.io/scheme"]; httpTLS && v != "https" || !httpTLS && ok {
		t.Errorf("annotation prometheus.io/scheme %q (set: %v): want https with --http-tls, none without", v, ok)
	}

	// Non-root, read-only root filesystem, nothing extra.
	sc := ps.SecurityContext
	uid := int64(runtimeUser)
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || !reflect.DeepEqual(sc.RunAsUser, &uid) ||
		!reflect.DeepEqual(sc.RunAsGroup, &uid) || !reflect.DeepEqual(sc.FSGroup, &uid) ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, uid/gid/fsGroup %d, seccomp RuntimeDefault", sc, runtimeUser)
	}
	cs := ct.SecurityContext
	if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
		cs.Capabilities == nil || !reflect.DeepEqual(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", cs)
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		t.Error("enableServiceLinks must be false: the Service latch would set LATCH_* variables")
	}

	// Shutdown: the node transfers leadership and drains in ~10 s.
	if g := ps.TerminationGracePeriodSeconds; g == nil || *g < 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want >= 30", g)
	}

	// One voter per node.
	pod := labels.Set(c.sts.Spec.Template.Labels)
	var spread bool
	if ps.Affinity != nil && ps.Affinity.PodAntiAffinity != nil {
		for _, term := range ps.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			spread = spread || (err == nil && !sel.Empty() && sel.Matches(pod) && term.TopologyKey == "kubernetes.io/hostname")
		}
	}
	if !spread {
		t.Error("no required podAntiAffinity on kubernetes.io/hostname that selects the latch pods")
	}

	// Resources, and GOMEMLIMIT from a memory limit that exists.
	r := ct.Resources
	for _, q := range []struct {
		got  resource.Quantity
		want string
	}{{r.Requests[corev1.ResourceCPU], "250m"}, {r.Requests[corev1.ResourceMemory], "256Mi"}, {r.Limits[corev1.ResourceMemory], "1Gi"}} {
		if q.got.Cmp(resource.MustParse(q.want)) != 0 {
			t.Errorf("resources: %s, want %s", q.got.String(), q.want)
		}
	}
	var memlimit bool
	for _, e := range ct.Env {
		if e.Name == "GOMEMLIMIT" {
			f := e.ValueFrom
			memlimit = f != nil && f.ResourceFieldRef != nil && f.ResourceFieldRef.Resource == "limits.memory" &&
				f.ResourceFieldRef.ContainerName == ct.Name && (f.ResourceFieldRef.Divisor.IsZero() || f.ResourceFieldRef.Divisor.Value() == 1)
		}
	}
	if !memlimit {
		t.Error("GOMEMLIMIT must come from this container's limits.memory in bytes")
	}
}

func checkPDB(t *testing.T, c *cluster) {
	t.Helper()
	if len(c.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(c.pdbs))
	}
	p := c.pdbs[0]
	if p.Name != "latch" || p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %s maxUnavailable %v minAvailable %v: want latch, 1, none", p.Name, p.Spec.MaxUnavailable, p.Spec.MinAvailable)
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(c.sts.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not match the pod labels", p.Spec.Selector)
	}
	// A disruption must leave a quorum.
	if n := c.replicas(); n-1 < n/2+1 {
		t.Errorf("%d replicas minus one is below a quorum", n)
	}
}
