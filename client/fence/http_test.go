package fence

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A real HTTP server on loopback with the middleware in front of a store of one value per
// path.
func newStore(t *testing.T) (url string, get func(path string) string) {
	t.Helper()
	var mu sync.Mutex
	data := map[string]string{}
	g := NewGuard(0)
	h := g.Middleware(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		data[r.URL.Path] = string(body)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, func(path string) string {
		mu.Lock()
		defer mu.Unlock()
		return data[path]
	}
}

func put(t *testing.T, url, token, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(Header, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestMiddleware(t *testing.T) {
	url, get := newStore(t)
	if code, _, _ := put(t, url+"/a", "7", "seven"); code != http.StatusNoContent {
		t.Fatalf("token 7: %d, want 204", code)
	}
	code, body, hdr := put(t, url+"/a", "6", "six")
	if code != http.StatusConflict {
		t.Fatalf("token 6 after 7: %d, want 409", code)
	}
	if !strings.Contains(body, "token 6") || !strings.Contains(body, "token 7 has been accepted") {
		t.Fatalf("409 body %q does not say which tokens", body)
	}
	if hdr.Get(SeenHeader) != "7" {
		t.Fatalf("%s = %q, want 7", SeenHeader, hdr.Get(SeenHeader))
	}
	if got := get("/a"); got != "seven" {
		t.Fatalf("/a = %q after the stale write, want seven", got)
	}
	if code, _, _ := put(t, url+"/a", "7", "seven again"); code != http.StatusNoContent {
		t.Fatalf("token 7 again: %d, want 204", code)
	}
	// Another resource has a mark of its own.
	if code, _, _ := put(t, url+"/b", "3", "three"); code != http.StatusNoContent {
		t.Fatalf("/b token 3: %d, want 204", code)
	}
	for _, bad := range []string{"", "0", "abc", strconv.FormatUint(MaxToken+1, 10)} {
		code, body, _ := put(t, url+"/a", bad, "bad")
		if code != http.StatusBadRequest || !strings.Contains(body, Header) {
			t.Errorf("token %q: %d %q, want 400 naming %s", bad, code, body, Header)
		}
	}
	if got := get("/a"); got != "seven again" {
		t.Fatalf("/a = %q, want the last accepted write", got)
	}
}

// Requests with interleaved tokens race for one path; the value left is the highest
// token's, and no stale write lands after a newer one.
func TestMiddlewareConcurrent(t *testing.T) {
	url, get := newStore(t)
	const clients, each = 4, 25
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				tok := strconv.Itoa(i*clients + c + 1)
				code, _, _ := put(t, url+"/x", tok, tok)
				if code != http.StatusNoContent && code != http.StatusConflict {
					t.Errorf("token %s: %d", tok, code)
				}
			}
		})
	}
	wg.Wait()
	if got := get("/x"); got != strconv.Itoa(clients*each) {
		t.Fatalf("/x = %q, want the highest token %d", got, clients*each)
	}
}
