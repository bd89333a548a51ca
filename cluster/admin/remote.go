package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Remote is a node's --http as admin calls reach it: "host:port" or "http://host:port" is
// plain HTTP, "https://host:port" is TLS. The CLI's admin verbs and a joining member both
// call through it.
type Remote struct {
	base string      // scheme://host:port
	tls  *tls.Config // for https:// (nil: the system's roots, no client certificate)
}

// NewRemote returns the remote for addr; tc is the TLS config for https://.
func NewRemote(addr string, tc *tls.Config) Remote {
	if rest, ok := strings.CutPrefix(addr, "https://"); ok {
		return Remote{base: "https://" + rest, tls: tc}
	}
	return Remote{base: "http://" + strings.TrimPrefix(addr, "http://")}
}

// client returns the HTTP client of one admin call, and the func that closes its
// connection. Every call has a connection of its own: --join behind a Service (or a DNS name
// with several nodes) then reaches another node on each retry instead of sticking to the
// one its first connection went to. Within the call the connection is kept, so that a
// signed call asks /v1/status of the same node it then sends the call to.
func (a Remote) client() (*http.Client, func()) {
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxConnsPerHost: 1, TLSClientConfig: a.tls}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections
}

// Call sends an admin request (signed, when secret is set) for path (and query) and decodes
// a JSON answer into out, turning an {"error": ...} answer into an error.
func (a Remote) Call(ctx context.Context, method, path string, body, secret []byte, out any) error {
	_, data, err := a.Do(ctx, method, path, body, secret, 1<<20)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Do sends an admin request and returns the answer's headers and body (at most limit
// bytes), turning a non-2xx answer into a *StatusError. A POST says its Content-Type
// (ContentType), and the Host is the one of the address the remote was made with. With secret, it first asks the
// node's /v1/status for its id and boot id, on the same connection, and signs the call for
// them: a signature is good on that node, in that run, once.
func (a Remote) Do(ctx context.Context, method, path string, body, secret []byte, limit int64) (http.Header, []byte, error) {
	hc, done := a.client()
	defer done()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", ContentType(path)) // a POST without it is refused (browser.go)
	}
	if secret != nil {
		var to Target
		if err := getJSON(ctx, hc, a.base+"/v1/status", &to); err != nil {
			return nil, nil, fmt.Errorf("asking the node which run to sign for (GET /v1/status): %w", err)
		}
		if err := Sign(req, secret, to, Digest(body), time.Now()); err != nil {
			return nil, nil, err
		}
	}
	return do(hc, req, limit)
}

// Members returns the members of the cluster behind a (GET /v1/peers).
func (a Remote) Members(ctx context.Context) ([]Member, error) {
	var ms []Member
	err := a.Call(ctx, http.MethodGet, "/v1/peers", nil, nil, &ms)
	return ms, err
}

// getJSON GETs url with hc and decodes the JSON answer into out.
func getJSON(ctx context.Context, hc *http.Client, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	_, data, err := do(hc, req, 1<<20)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// do sends req and returns the answer's headers and body (at most limit bytes), turning a
// non-2xx answer into a *StatusError.
func do(hc *http.Client, req *http.Request, limit int64) (http.Header, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, nil, &StatusError{Code: resp.StatusCode, Status: resp.Status, Msg: msg}
	}
	return resp.Header, data, nil
}

// StatusError is a non-2xx answer of an admin call.
type StatusError struct {
	Code        int
	Status, Msg string
}

func (e *StatusError) Error() string { return e.Status + ": " + e.Msg }

// AddPeer asks the cluster, through this node (done on the leader), to add a member, signed
// with secret; RemovePeer to remove the member id. Both return the answer's fields (what was
// done, e.g. "added": id). Errors are Call's.
func (a Remote) AddPeer(ctx context.Context, req AddRequest, secret []byte) (map[string]string, error) {
	body, _ := json.Marshal(req)
	var out map[string]string
	return out, a.Call(ctx, http.MethodPost, "/v1/peers", body, secret, &out)
}

// RemovePeer: see AddPeer.
func (a Remote) RemovePeer(ctx context.Context, id string, secret []byte) (map[string]string, error) {
	var out map[string]string
	return out, a.Call(ctx, http.MethodDelete, "/v1/peers/"+id, nil, secret, &out)
}
