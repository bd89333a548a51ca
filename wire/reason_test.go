package wire

import "testing"

func TestReasons(t *testing.T) {
	closes := map[Reason]bool{
		ReasonBadRequest:     true,
		ReasonBadKey:         false,
		ReasonBadOwner:       false,
		ReasonBadRange:       false,
		ReasonAuthRequired:   true,
		ReasonAuthFailed:     true,
		ReasonBadVersion:     true,
		ReasonUnavailable:    false,
		ReasonIndeterminate:  false,
		ReasonTokenExhausted: false,
		ReasonInternal:       false,
	}
	if len(Reasons) != len(closes) {
		t.Fatalf("Reasons has %d entries, want %d", len(Reasons), len(closes))
	}
	for _, r := range Reasons {
		want, ok := closes[r]
		if !ok {
			t.Errorf("unexpected reason %q in Reasons", r)
		}
		if r.Closes() != want {
			t.Errorf("%q.Closes() = %v, want %v", r, r.Closes(), want)
		}
		if !validReason([]byte(r)) {
			t.Errorf("known reason %q is not valid", r)
		}
		if k, ok := knownReason([]byte(r)); !ok || k != r {
			t.Errorf("knownReason(%q) = %q, %v", r, k, ok)
		}
	}
	if Reason("some_future_reason").Closes() {
		t.Error("an unknown reason closes")
	}
	if _, ok := knownReason([]byte("bad_keys")); ok {
		t.Error("knownReason accepts bad_keys")
	}
}

func TestValidReason(t *testing.T) {
	for s, want := range map[string]bool{
		"a":                                 true,
		"_":                                 true,
		"token_exhausted":                   true,
		"abcdefghijklmnopqrstuvwxyz______":  true,  // 32 bytes
		"abcdefghijklmnopqrstuvwxyz_______": false, // 33 bytes
		"":                                  false,
		"Bad":                               false,
		"bad key":                           false,
		"bad-key":                           false,
		"x1":                                false,
		"é":                                 false,
		"internal\n":                        false,
	} {
		if got := validReason([]byte(s)); got != want {
			t.Errorf("validReason(%q) = %v, want %v", s, got, want)
		}
	}
}
