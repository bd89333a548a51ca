package processtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/deploy/manifests"

	"github.com/latchd/latch/cluster/clustertest"
)

const (
	serviceIP       = "127.0.0.19" // the Services latch (client, http) and latch-peers
	namespace       = "latch-test"
	waitBound       = 60 * time.Second
	secretPath      = "/etc/latch/secret/secret"       // where the manifests mount latch-secret (clients)
	peerSecretPath  = "/etc/latch/peer-secret/secret"  // latch-peer-secret (the nodes)
	adminSecretPath = "/etc/latch/admin-secret/secret" // latch-admin-secret (operators)
	dataPath        = "/data"                          // the volumeClaimTemplate's mount
)

func podIP(i int) string { return fmt.Sprintf("127.0.0.%d", 20+i) }

var latchBin string

func TestMain(m *testing.M) {
	os.Exit(clustertest.RunWithLatch(m, &latchBin))
}

// statefulSet is the set of pods of one test: their volumes, secret and Services.
type statefulSet struct {
	t      *testing.T
	args   []string // the container args as rendered, unexpanded
	root   string   // volumes live in root/data-latch-<i>
	secret string   // what latch-secret holds (clients); peer and admin: the other two Secrets
	peer   string
	admin  string
	mu     sync.Mutex
	pods   map[int]*pod
	mounts map[string]string // other mounted Secrets: mount path prefix -> a directory of this test
	env    []string          // extra environment of the latch CLI
	// probe gets the pods' http port (readiness, metrics) as the probes and Prometheus do:
	// plain HTTP, or HTTPS trusting the test CA for pods with --http-tls (see useHTTPS).
	probe struct {
		scheme string
		client *http.Client
	}
}

type pod struct {
	i    int
	cmd  *exec.Cmd
	log  *clustertest.Buffer
	done chan struct{}
}

var voterLine = regexp.MustCompile(`(?m)\svoter$`)

var peerName = regexp.MustCompile(`latch-(\d+)\.latch-peers`)

// podArgs maps the rendered args to pod i on loopback: the downward API's POD_NAME and
// POD_NAMESPACE, DNS names to loopback addresses, 0.0.0.0 to the pod's address, and the
// volume and Secret mounts to files of this test.
func (s *statefulSet) podArgs(i int) []string {
	args := manifests.ExpandArgs(s.args, map[string]string{"POD_NAME": fmt.Sprintf("latch-%d", i), "POD_NAMESPACE": namespace})
	out := make([]string, len(args))
	for j, a := range args {
		a = strings.ReplaceAll(a, "0.0.0.0:", podIP(i)+":")
		a = peerName.ReplaceAllStringFunc(a, func(m string) string {
			n, _ := strconv.Atoi(peerName.FindStringSubmatch(m)[1])
			return podIP(n)
		})
		for mount, dir := range s.mounts {
			if strings.HasPrefix(a, mount+"/") {
				a = filepath.Join(dir, strings.TrimPrefix(a, mount+"/"))
			}
		}
		// The client Service latch (--join latch:7402 or https://latch:7402).
		scheme, rest, ok := strings.Cut(a, "://")
		if !ok {
			scheme, rest = "", a
		}
		switch {
		case a == dataPath:
			a = s.volume(i)
		case a == secretPath:
			a = s.secret
		case a == peerSecretPath:
			a = s.peer
		case a == adminSecretPath:
			a = s.admin
		case strings.HasPrefix(rest, "latch:"):
			a = serviceIP + strings.TrimPrefix(rest, "latch")
			if scheme != "" {
				a = scheme + "://" + a
			}
		}
		out[j] = a
	}
	return out
}

func (s *statefulSet) volume(i int) string {
	return filepath.Join(s.root, fmt.Sprintf("data-latch-%d", i))
}

// start starts pods (all at once, as podManagementPolicy Parallel does).
func (s *statefulSet) start(pods ...int) {
	s.t.Helper()
	for _, i := range pods {
		cmd := exec.Command(latchBin, s.podArgs(i)...)
		p := &pod{i: i, cmd: cmd, log: &clustertest.Buffer{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = p.log, p.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			s.t.Fatal(err)
		}
		go func() { cmd.Wait(); close(p.done) }()
		s.mu.Lock()
		s.pods[i] = p
		s.mu.Unlock()
	}
}

// kill SIGKILLs pods, as a lost node does.
func (s *statefulSet) kill(pods ...int) {
	for _, i := range pods {
		s.mu.Lock()
		p := s.pods[i]
		delete(s.pods, i)
		s.mu.Unlock()
		if p != nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (s *statefulSet) running() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i := range s.pods {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// get GETs path on pod i's http port, as a probe or Prometheus does, and returns the status
// code and body.
func (s *statefulSet) get(i int, path string) (int, []byte, error) {
	s.mu.Lock()
	scheme, c := s.probe.scheme, s.probe.client
	s.mu.Unlock()
	resp, err := c.Get(scheme + "://" + podIP(i) + ":7402" + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// ready reports whether pod i's readiness probe (/readyz on its http port) passes.
func (s *statefulSet) ready(i int) bool {
	code, _, err := s.get(i, "/readyz")
	return err == nil && code == http.StatusOK
}

func (s *statefulSet) waitFor(what string, cond func() bool) {
	s.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > waitBound {
			s.t.Fatalf("%s: not within %v", what, waitBound)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
}

func (s *statefulSet) allReady() {
	s.t.Helper()
	s.waitFor(fmt.Sprintf("pods %v ready", s.running()), func() bool {
		for _, i := range s.running() {
			if !s.ready(i) {
				return false
			}
		}
		return true
	})
}

// latch runs the CLI, bounded, and returns its exit code and output.
func (s *statefulSet) latch(args ...string) (int, string) {
	s.t.Helper()
	return s.latchEnv(nil, args...)
}

// latchEnv runs the CLI as latch does, with env on top of s.env: "NAME=VALUE" sets NAME,
// "NAME" alone removes it (e.g. LATCH_ADMIN_SECRET_FILE: a call without --admin-secret-file).
// The CLI holds the client and admin secrets, as a client and an operator do; never the
// peer secret.
func (s *statefulSet) latchEnv(env []string, args ...string) (int, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, latchBin, args...)
	cmd.Env = append(os.Environ(), "LATCH_SECRET_FILE="+s.secret, "LATCH_ADMIN_SECRET_FILE="+s.admin,
		"LATCH_SERVERS="+serviceIP+":7400", "LATCH_HTTP="+serviceIP+":7402")
	cmd.Env = append(cmd.Env, s.env...)
	for _, e := range env {
		if strings.Contains(e, "=") {
			cmd.Env = append(cmd.Env, e) // the last value of a name wins
			continue
		}
		cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, e+"=") })
	}
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if d := time.Since(t0); d > time.Second {
		s.t.Logf("latch %v took %v", args, d)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		s.t.Fatalf("latch %v: %v\n%s", args, err, out)
	}
	return 0, string(out)
}

// acquire takes key through the client Service and returns its token.
func (s *statefulSet) acquire(key string) uint64 {
	s.t.Helper()
	code, out := s.latch("acquire", "--lease", "1h", "--wait", "5s", "--json", key)
	var r struct {
		Token uint64 `json:"token"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Token == 0 {
		s.t.Fatalf("latch acquire %s: exit %d, %q", key, code, out)
	}
	return r.Token
}

func (s *statefulSet) voters() int {
	_, out := s.latch("peers", "list")
	return len(voterLine.FindAllString(out, -1))
}

// service proxies serviceIP:port to port on a ready pod, like a Service's endpoints.
func (s *statefulSet) service(port int) {
	s.t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", serviceIP, port))
	if err != nil {
		s.t.Fatalf("the Service address: %v", err)
	}
	var next atomic.Uint64
	var conns sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	s.t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}()
				pods := s.running()
				first := int(next.Add(1))
				for k := range pods {
					i := pods[(first+k)%len(pods)]
					if !s.ready(i) {
						continue
					}
					b, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", podIP(i), port), time.Second)
					if err != nil {
						continue
					}
					defer b.Close()
					go func() { io.Copy(b, c); b.(*net.TCPConn).CloseWrite() }()
					io.Copy(c, b)
					return
				}
			}()
		}
	}()
}

func newStatefulSet(t *testing.T) *statefulSet {
	t.Helper()
	five, err := manifests.PodArgs("../k8s/overlays/five")
	if err != nil {
		t.Fatal(err)
	}
	s := newStatefulSetOf(t, "../k8s/base")
	if !slices.Equal(s.args, five) {
		t.Fatalf("the five-node overlay changes the pod args:\n%q\n%q", s.args, five)
	}
	return s
}

// newStatefulSetOf prepares the pods of the kustomization in dir.
func newStatefulSetOf(t *testing.T, dir string) *statefulSet {
	t.Helper()
	args, err := manifests.PodArgs(dir)
	if err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	s := &statefulSet{t: t, args: args, root: t.TempDir(), pods: map[int]*pod{}, mounts: map[string]string{},
		secret: filepath.Join(secrets, "client"), peer: filepath.Join(secrets, "peer"), admin: filepath.Join(secrets, "admin")}
	s.probe.scheme, s.probe.client = "http", &http.Client{Timeout: time.Second}
	for file, secret := range map[string]string{
		s.secret: "c2VjcmV0LWZvci10aGUtc3RhdGVmdWxzZXQtdGVzdC0wMTIzNDU2Nzg5",
		s.peer:   "cGVlci1zZWNyZXQtb2YtdGhlLXN0YXRlZnVsc2V0LXRlc3QtOTg3NjU0",
		s.admin:  "YWRtaW4tc2VjcmV0LW9mLXRoZS1zdGF0ZWZ1bHNldC10ZXN0LTU1NTU1",
	} {
		if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		running := s.running()
		if t.Failed() {
			for _, i := range running {
				t.Logf("log of latch-%d:\n%s", i, s.pods[i].log.String())
			}
		}
		s.kill(running...)
	})
	s.service(7400)
	s.service(7402)
	return s
}

func replicas(t *testing.T, dir string) []int {
	t.Helper()
	n, err := manifests.Replicas(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for i := range n {
		out = append(out, i)
	}
	return out
}

// TestStatefulSetLifecycle: three pods with the StatefulSet's args form a cluster; scaling
// to five (the overlay) adds two pods that join by themselves; a backup taken through the
// client Service survives the loss of every volume: a fresh cluster from the same args
// takes the restore, every lock comes back, and tokens keep rising above the floor.
func TestStatefulSetLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts eight latch processes; skipped with -short")
	}
	s := newStatefulSet(t)
	three, five := replicas(t, "../k8s/base"), replicas(t, "../k8s/overlays/five")
	if len(three) != 3 || len(five) != 5 {
		t.Fatalf("replicas %d and %d, want 3 and 5", len(three), len(five))
	}

	s.start(three...)
	s.allReady()
	var last uint64
	rising := func(key string) uint64 {
		t.Helper()
		tok := s.acquire(key)
		if tok <= last {
			t.Fatalf("token %d for %s, not above %d", tok, key, last)
		}
		last = tok
		return tok
	}
	held := map[string]uint64{}
	for _, k := range []string{"jobs/nightly", "jobs/migrate"} {
		held[k] = rising(k)
	}

	s.start(five[3:]...) // kubectl scale --replicas 5, or the five overlay
	s.waitFor("five voters", func() bool { return s.voters() == 5 })
	s.allReady()
	for _, i := range five[3:] {
		// A node logs its promotion once the configuration saying so reaches it.
		s.waitFor(fmt.Sprintf("latch-%d logs that it joined", i), func() bool {
			return strings.Contains(s.pods[i].log.String(), "joined the cluster")
		})
		if l := s.pods[i].log.String(); !strings.Contains(l, "added to the cluster as a nonvoter") || strings.Contains(l, "bootstrapping a new cluster") {
			t.Fatalf("latch-%d did not join through --join as a nonvoter first:\n%s", i, l)
		}
	}
	held["jobs/after-scale"] = rising("jobs/after-scale")

	backup := filepath.Join(t.TempDir(), "latch.snap")
	// The client secret (latch-secret) and the peer secret (latch-peer-secret) sign no admin
	// call; the admin secret (latch-admin-secret) does.
	for _, wrong := range []string{s.secret, s.peer} {
		if code, out := s.latchEnv([]string{"LATCH_ADMIN_SECRET_FILE=" + wrong}, "snapshot", "save", backup); code == 0 ||
			!strings.Contains(out, "40") || !strings.Contains(out, "--admin-secret-file") {
			t.Fatalf("snapshot save signed with %s: exit %d, %q; want a refusal naming --admin-secret-file", wrong, code, out)
		}
	}
	if code, out := s.latch("snapshot", "save", backup); code != 0 || !strings.Contains(out, "3 held keys") {
		t.Fatalf("snapshot save: exit %d, %q", code, out)
	}
	afterBackup := rising("jobs/after-backup") // the trap: issued after the backup

	// Disaster: every pod and every volume is lost.
	s.kill(s.running()...)
	for _, i := range five {
		if err := os.RemoveAll(s.volume(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.start(three...)
	s.allReady()
	if tok := s.acquire("fresh"); tok != 1 {
		t.Fatalf("a fresh cluster's first token is %d, want 1", tok)
	}
	code, out := s.latch("snapshot", "restore", "--token-floor", strconv.FormatUint(afterBackup, 10), backup)
	if code != 0 {
		t.Fatalf("snapshot restore: exit %d, %q", code, out)
	}
	s.allReady()
	for k := range held {
		if code, out := s.latch("acquire", "--wait", "0", k); code != 75 {
			t.Fatalf("%s should be held after the restore: exit %d, %q", k, code, out)
		}
	}
	if tok := rising("jobs/after-backup"); tok <= afterBackup {
		t.Fatalf("token %d after the restore, not above %d", tok, afterBackup)
	}
	if code, out := s.latch("release", "jobs/nightly", strconv.FormatUint(held["jobs/nightly"], 10)); code != 0 {
		t.Fatalf("releasing a restored lock with its token: exit %d, %q", code, out)
	}

	s.start(five[3:]...) // scale to five again: the wiped pods join the restored cluster
	s.waitFor("five voters after the restore", func() bool { return s.voters() == 5 })
	s.allReady()
	rising("jobs/final")
	s.waitFor(fmt.Sprintf("latch status shows last token %d", last), func() bool {
		_, status := s.latch("status")
		sc := bufio.NewScanner(strings.NewReader(status))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "last" && f[1] == "token" {
				return f[2] == strconv.FormatUint(last, 10)
			}
		}
		return false
	})
}

// TestStatefulSetLostQuorum: a five-pod cluster loses every pod, and the volumes of four of
// them. The survivor, latch-3 (outside --initial-cluster), is recovered offline with latch
// recover and started; the wiped pods restart with the same args. latch-0..2 find the
// recovered cluster behind --join instead of bootstrapping a rival one among themselves,
// and all join it: five voters, the locks, and tokens above the floor.
func TestStatefulSetLostQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten latch processes; skipped with -short")
	}
	s := newStatefulSet(t)
	five := replicas(t, "../k8s/overlays/five")
	s.start(five...)
	s.waitFor("five voters", func() bool { return s.voters() == 5 })
	s.allReady()
	keys := []string{"db/migrate", "cron/report"}
	var last uint64
	for _, k := range keys {
		last = s.acquire(k)
	}
	s.waitFor("latch-3 applied the grants", func() bool {
		code, body, err := s.get(3, "/metrics")
		return err == nil && code == http.StatusOK && strings.Contains(string(body), fmt.Sprintf("\nlatch_last_token %d\n", last))
	})

	s.kill(s.running()...)
	for _, i := range []int{0, 1, 2, 4} {
		if err := os.RemoveAll(s.volume(i)); err != nil {
			t.Fatal(err)
		}
	}
	code, out := s.latch("recover", "--data-dir", s.volume(3), "--dry-run")
	if code != 0 || !strings.Contains(out, "2 held keys") {
		t.Fatalf("recover --dry-run: exit %d, %q", code, out)
	}
	floor := last + 1_000_000
	code, out = s.latch("recover", "--data-dir", s.volume(3), "--id", "latch-3", "--advertise", podIP(3)+":7401",
		"--token-floor", strconv.FormatUint(floor, 10))
	if code != 0 {
		t.Fatalf("recover: exit %d, %q", code, out)
	}
	s.start(3)
	s.allReady()
	s.start(0, 1, 2, 4)
	s.waitFor("five voters around the recovered pod", func() bool { return s.voters() == 5 })
	s.allReady()
	for _, i := range []int{0, 1, 2, 4} {
		if l := s.pods[i].log.String(); strings.Contains(l, "bootstrapping a new cluster") {
			t.Fatalf("wiped latch-%d bootstrapped a rival cluster:\n%s", i, l)
		}
	}
	for _, k := range keys {
		if code, out := s.latch("acquire", "--wait", "0", k); code != 75 {
			t.Fatalf("%s should be held after the recovery: exit %d, %q", k, code, out)
		}
	}
	if tok := s.acquire("after/recovery"); tok <= floor {
		t.Fatalf("token %d after the recovery, not above the floor %d", tok, floor)
	}
}
