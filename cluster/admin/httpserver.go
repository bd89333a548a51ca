package admin

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// HTTPConfig bounds a node's HTTP server (--http): how long a client may take over each part
// of a request, how much header it may send, and how many connections it may hold. Zero
// fields take the DefaultHTTPConfig values.
type HTTPConfig struct {
	// ReadHeaderTimeout bounds the request line and headers, from the end of the previous
	// request (or accept).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a whole request, body included. A restore upload gets longer while
	// it keeps up MinTransferRate.
	ReadTimeout time.Duration
	// WriteTimeout bounds a response, from the end of its request's headers. A backup
	// download gets as long as making the backup may take, then longer while the client
	// reads at MinTransferRate.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has sent no request for this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MaxConns is the most connections open at once. A connection over it takes the place
	// of the one that has been idle longest (a keep-alive between requests, or one that has
	// not sent its first request yet); when every one has a request in progress it is closed
	// at once.
	MaxConns int
	// MinTransferRate is the slowest, in bytes a second, a restore upload may arrive and a
	// backup download may be read once the time above is used up.
	MinTransferRate int64
	// Logger receives the connection cap's warnings (rate-limited). Nil: none.
	Logger hclog.Logger
}

// DefaultHTTPConfig returns the bounds latch serves --http with.
func DefaultHTTPConfig() HTTPConfig {
	return HTTPConfig{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		MaxConns:          256,
		MinTransferRate:   1 << 20,
	}
}

func (c HTTPConfig) withDefaults() HTTPConfig {
	d := DefaultHTTPConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&c.ReadHeaderTimeout, d.ReadHeaderTimeout)
	set(&c.ReadTimeout, d.ReadTimeout)
	set(&c.WriteTimeout, d.WriteTimeout)
	set(&c.IdleTimeout, d.IdleTimeout)
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if c.MaxConns <= 0 {
		c.MaxConns = d.MaxConns
	}
	if c.MinTransferRate <= 0 {
		c.MinTransferRate = d.MinTransferRate
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// NewHTTPServer returns the server for h with cfg's bounds, and ln wrapped so that at most
// cfg.MaxConns of its connections are open at once. Serve the returned listener; wrap it in
// TLS (tls.NewListener), not ln, so that the cap counts TCP connections.
func NewHTTPServer(h http.Handler, ln net.Listener, cfg HTTPConfig) (*http.Server, net.Listener) {
	cfg = cfg.withDefaults()
	capped := newConnCap(ln, cfg.MaxConns, cfg.Logger)
	hs := &http.Server{
		Handler:           transfers(h, cfg),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnState:         capped.track,
		ErrorLog:          log.New(&serverErrors{log: cfg.Logger}, "", 0),
	}
	return hs, capped
}

// transfers gives the two endpoints that move a whole backup more time than cfg's timeouts,
// as long as the bytes keep coming: a restore's body may arrive at MinTransferRate after
// ReadTimeout, and a backup may take transferTimeout to make and then be read at
// MinTransferRate after WriteTimeout.
func transfers(h http.Handler, cfg HTTPConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/restore":
			rc := http.NewResponseController(w)
			// On a copy: the server decides from its own request's body whether an unread
			// body is too big to drain before it answers (it closes the connection instead).
			r = r.WithContext(r.Context())
			r.Body = &pacedBody{ReadCloser: r.Body, rc: rc, start: time.Now(), cfg: cfg}
			_ = rc.SetWriteDeadline(time.Now().Add(cfg.ReadTimeout + transferTimeout + cfg.WriteTimeout))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/snapshot":
			rc := http.NewResponseController(w)
			_ = rc.SetWriteDeadline(time.Now().Add(transferTimeout + cfg.WriteTimeout))
			w = &pacedWriter{ResponseWriter: w, rc: rc, cfg: cfg}
		}
		h.ServeHTTP(w, r)
	})
}

// pacedBody is a restore's request body: each read must come by start + ReadTimeout plus the
// time the bytes so far take at MinTransferRate, so a slow-loris body is cut off about
// ReadTimeout after it began while a large upload at a real rate is not. The response may
// be written until transferTimeout (the restore itself) and WriteTimeout after that.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	cfg   HTTPConfig
	n     int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	dl := b.start.Add(b.cfg.ReadTimeout + rateTime(b.n, b.cfg.MinTransferRate))
	_ = b.rc.SetReadDeadline(dl)
	_ = b.rc.SetWriteDeadline(dl.Add(transferTimeout + b.cfg.WriteTimeout))
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// pacedWriter is a backup's response: each write may take WriteTimeout plus the time its
// bytes take at MinTransferRate.
type pacedWriter struct {
	http.ResponseWriter
	rc  *http.ResponseController
	cfg HTTPConfig
}

func (w *pacedWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.cfg.WriteTimeout + rateTime(int64(len(p)), w.cfg.MinTransferRate)))
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rateTime is how long n bytes take at rate bytes a second.
func rateTime(n, rate int64) time.Duration {
	return time.Duration(float64(n) / float64(rate) * float64(time.Second))
}

// serverErrors takes the http.Server's own error lines (a failed TLS handshake, a failed
// accept) into the node's log, at most one a second: a flood of bad connections would
// otherwise write one line each.
type serverErrors struct {
	log        hclog.Logger
	next       atomic.Int64 // unix nanoseconds before which lines are held back
	suppressed atomic.Uint64
}

func (e *serverErrors) Write(p []byte) (int, error) {
	now := time.Now().UnixNano()
	next := e.next.Load()
	if now < next || !e.next.CompareAndSwap(next, now+int64(time.Second)) {
		e.suppressed.Add(1)
		return len(p), nil
	}
	e.log.Warn("HTTP server error", "error", strings.TrimSpace(strings.TrimPrefix(string(p), "http: ")), "suppressed", e.suppressed.Swap(0))
	return len(p), nil
}

// netConnOf returns the TCP connection under c (c itself, or the one under its TLS).
func netConnOf(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}
