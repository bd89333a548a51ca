package fence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Header is the request header that carries the token to Middleware.
const Header = "Latch-Token"

// SeenHeader is the response header of a 409: the highest token the resource has accepted.
const SeenHeader = "Latch-Token-Seen"

// Middleware guards the writes of an HTTP service with g. For each request it reads the
// token from the Latch-Token header and the resource from resource(r) (the URL path when
// resource is nil), and runs next under Do: only if the token is at least the resource's
// mark, with the resource locked until next returns, after which the token is the mark.
//
//   - No Latch-Token header, or one that is not a token (1..2^63-1): 400, next not run.
//   - A stale token: 409 Conflict, next not run; the body names the refused token and the
//     token the resource has accepted, which is also in the Latch-Token-Seen header.
//   - Otherwise next answers, and the token becomes the mark whatever next answered: the
//     middleware cannot know what a failing handler had already changed, so it keeps the
//     safe side (older tokens are stale once a newer one has been presented anyway).
//
// Wrap only the routes that write. Requests for one resource run one at a time; keep the
// handler short.
func (g *Guard) Middleware(resource func(*http.Request) string, next http.Handler) http.Handler {
	if resource == nil {
		resource = func(r *http.Request) string { return r.URL.Path }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.Header.Get(Header)
		if raw == "" {
			http.Error(w, fmt.Sprintf("missing %s header: send the fencing token of the lock you hold", Header), http.StatusBadRequest)
			return
		}
		token, err := ParseToken(raw)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad %s header: %v", Header, err), http.StatusBadRequest)
			return
		}
		res := resource(r)
		err = g.Do(res, token, func() error {
			next.ServeHTTP(w, r)
			return nil
		})
		var stale *StaleError
		if errors.As(err, &stale) {
			w.Header().Set(SeenHeader, strconv.FormatUint(stale.Seen, 10))
			http.Error(w, stale.Error(), http.StatusConflict)
		}
	})
}
