package admin

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/latchd/latch/cluster/outcome"
)

// A failed change answers its outcome's HTTP status, for every outcome; one whose outcome is
// unknown says what to check, and says "outcome unknown" once.
func TestChangeErrorStatusIsTheOutcomes(t *testing.T) {
	for _, k := range outcome.Kinds {
		rec := httptest.NewRecorder()
		err := outcome.New(k, errors.New("raft said no"))
		writeChangeErr(rec, err, "latch peers list")
		if rec.Code != outcome.HTTPStatus(err) {
			t.Errorf("%v: status %d, want %d", k, rec.Code, outcome.HTTPStatus(err))
		}
		body := rec.Body.String()
		if k == outcome.Indeterminate && (!strings.Contains(body, "latch peers list") || strings.Count(body, "outcome unknown") != 1) {
			t.Errorf("%v: body %q: want the check named and the outcome said once", k, body)
		}
	}
}
