package admin

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
)

// Web pages. A browser on a machine that reaches --http (the operator's laptop, the node
// itself) is a client the credentials do not stop when the node has none (loopback, no
// secrets), and a page it shows can use it in two ways:
//
//   - a cross-site request: a page on any site sends a "simple" request (GET, HEAD, or a
//     POST of text/plain, form data or no declared type) to http://127.0.0.1:7402. The
//     browser sends it without asking (no CORS preflight), with any client certificate it
//     holds; it only hides the answer from the page.
//   - DNS rebinding: the page's own name (evil.example) is made to resolve to 127.0.0.1.
//     Its requests are then same-origin to the browser, which lets the page read the
//     answers, but their Host header still says evil.example.
//
// So every request to --http but the probes passes three rules (Check):
//
//  1. Host: an IP address, localhost, or a name of this node (Hosts). An IP address is no
//     rebinding (the browser went to that address, not through a name someone else
//     resolves) and localhost resolves on the machine itself. The port is not compared:
//     rebinding keeps the page's name whatever the port, and ports are rewritten on the way
//     for good reasons (docker -p, kubectl port-forward, a Service's port).
//  2. Origin, when a browser sends it, is this node itself (the scheme, host and port the
//     request was sent to), and Sec-Fetch-Site, when sent, is same-origin or none. Neither
//     the CLI nor a script sends them.
//  3. A POST says Content-Type application/json or application/octet-stream, or carries a
//     Latch-HMAC signature (auth.go). A page can send neither without a CORS preflight,
//     and latch grants none (it sends no Access-Control-* header). DELETE, the other
//     change, is never sent without one; GET and HEAD change nothing.
//
// The probes, GET or HEAD of /healthz, /readyz and /metrics, take any Host and Origin: the
// kubelet and Prometheus address a pod by its IP or by names latch is not told, and those
// answers change nothing and carry no key name (counts, member ids and addresses).

// Hosts are the names, besides IP addresses and localhost, that a request to --http may
// give in its Host header. The zero value allows IP addresses and localhost only.
type Hosts struct {
	names []string // lower case, no trailing dot, sorted, each once
}

// NewHosts returns the Hosts of a node whose --http listens on listen: the host of listen
// when it is a name, the machine's hostname when listen is every interface (0.0.0.0, ::),
// and names: each a host name, host:port or scheme://host:port (the port is ignored), or an
// IP address (allowed anyway). A name that is no DNS name is an error naming it.
func NewHosts(listen string, names ...string) (Hosts, error) {
	var h Hosts
	for _, n := range names {
		name := canonicalName(hostOf(n))
		if _, err := netip.ParseAddr(name); err == nil {
			continue // an IP address: allowed anyway
		}
		if !isDNSName(name) {
			return Hosts{}, fmt.Errorf("%q is not a host name: want letters, digits, '-', '_' and dots (a port is ignored), like latch.example.com", n)
		}
		h.add(name)
	}
	own := []string{hostOf(listen)}
	if ip, err := netip.ParseAddr(own[0]); own[0] == "" || err == nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			own = append(own, name)
		}
	}
	for _, n := range own {
		if name := canonicalName(n); isDNSName(name) {
			h.add(name)
		}
	}
	slices.Sort(h.names)
	return h, nil
}

// With is h with the hosts of names (host, host:port or scheme://host:port) added, each
// that is a host name: the names a node is known by, checked where they are configured.
func (h Hosts) With(names ...string) Hosts {
	out := Hosts{names: slices.Clone(h.names)}
	for _, n := range names {
		if name := canonicalName(hostOf(n)); isDNSName(name) {
			out.add(name)
		}
	}
	slices.Sort(out.names)
	return out
}

// add adds name (canonical), unless it is an IP address or localhost (both always allowed)
// or there already.
func (h *Hosts) add(name string) {
	if _, err := netip.ParseAddr(name); err == nil || name == "localhost" || slices.Contains(h.names, name) {
		return
	}
	h.names = append(h.names, name)
}

// Names are the names h allows besides IP addresses and localhost.
func (h Hosts) Names() []string { return slices.Clone(h.names) }

// Allows reports whether a Host header (host or host:port) names this node.
func (h Hosts) Allows(hostport string) bool {
	host := hostOf(hostport)
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := canonicalName(host)
	if name == "" {
		return false
	}
	if name == "localhost" {
		return true
	}
	_, found := slices.BinarySearch(h.names, name)
	return found
}

// Errors of Check, each the start of the answer's error.
var (
	ErrHost   = errors.New("admin: the Host of the request is not a name of this node")
	ErrOrigin = errors.New("admin: refusing a request from a web page")
	ErrSimple = errors.New("admin: refusing a POST that a web page could send from any site")
)

// Check applies the rules above to r, a request that is not a probe: it returns the
// status to refuse r with (421 a wrong Host, 403 another origin, 415 a simple POST) and
// why, or 0 and nil.
func (h Hosts) Check(r *http.Request) (int, error) {
	if !h.Allows(r.Host) {
		return http.StatusMisdirectedRequest, fmt.Errorf("%w: %q (a web page's name, through DNS rebinding, or a proxy's): "+
			"call it by an IP address, localhost, or a name given to the node with --http-allowed-host", ErrHost, r.Host)
	}
	if o := r.Header.Values("Origin"); len(o) > 0 && (len(o) > 1 || !sameOrigin(o[0], r)) {
		return http.StatusForbidden, fmt.Errorf("%w (Origin %q): admin calls come from the latch CLI and scripts, never from a browser", ErrOrigin, strings.Join(o, ", "))
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return http.StatusForbidden, fmt.Errorf("%w (Sec-Fetch-Site %q): admin calls come from the latch CLI and scripts, never from a browser", ErrOrigin, s)
	}
	if r.Method == http.MethodPost && !strings.HasPrefix(r.Header.Get("Authorization"), authScheme) && !declaredBody(r) {
		return http.StatusUnsupportedMediaType, fmt.Errorf("%w: say Content-Type: %s (or sign the call with --admin-secret-file)", ErrSimple, ContentType(r.URL.Path))
	}
	return 0, nil
}

// ContentType is the Content-Type of a POST to path: application/octet-stream for a
// restore (a backup), application/json for the rest.
func ContentType(path string) string {
	if path == "/v1/restore" || strings.HasPrefix(path, "/v1/restore?") {
		return "application/octet-stream"
	}
	return "application/json"
}

// declaredBody reports whether r has one Content-Type, application/json or
// application/octet-stream: neither is one a page may send across sites unasked.
func declaredBody(r *http.Request) bool {
	v := r.Header.Values("Content-Type")
	if len(v) != 1 {
		return false
	}
	mt, _, err := mime.ParseMediaType(v[0])
	return err == nil && (mt == "application/json" || mt == "application/octet-stream")
}

// sameOrigin reports whether origin (an Origin header) is the scheme, host and port r was
// sent to.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if err != nil || u.Scheme != scheme || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return false
	}
	return strings.EqualFold(withPort(u.Host, scheme), withPort(r.Host, scheme))
}

// withPort is hostport with the scheme's default port when it has none.
func withPort(hostport, scheme string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), port)
}

// hostOf is the host of s: a host, host:port, [v6]:port or scheme://host:port.
func hostOf(s string) string {
	s = strings.TrimSpace(s)
	if _, rest, ok := strings.Cut(s, "://"); ok {
		s, _, _ = strings.Cut(rest, "/")
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return strings.Trim(s, "[]")
}

// canonicalName is host in lower case without a trailing dot.
func canonicalName(host string) string { return strings.TrimSuffix(strings.ToLower(host), ".") }

// isDNSName reports whether name is letters, digits, '-', '_' and dots, in labels of 1..63
// bytes, 253 at most.
func isDNSName(name string) bool {
	if len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// isProbe reports whether r is a probe (GET or HEAD of /healthz, /readyz, /metrics), which
// the browser rules leave alone.
func isProbe(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		return true
	}
	return false
}

// guard answers every request but the probes that Check refuses, before next sees it.
func guard(next http.Handler, h Hosts) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isProbe(r) {
			if code, err := h.Check(r); err != nil {
				writeErr(w, code, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
