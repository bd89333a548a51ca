package client

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

func TestNormalize(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name      string
		budget    time.Duration
		wait      time.Duration
		lease     time.Duration
		want      error
		w         uint8
		l         uint16
		budgetOut time.Duration
	}{
		{"defaults", 0, 0, 0, nil, 0, 30, 0},
		{"sub-second wait rounds up", 0, time.Nanosecond, 0, nil, 1, 30, 0},
		{"wait 254.000000001 s is 255", 0, 254*s + 1, 0, nil, 255, 30, 0},
		{"wait 255 s", 0, 255 * s, 0, nil, 255, 30, 0},
		{"wait 255.000000001 s", 0, 255*s + 1, 0, ErrUnsupportedDuration, 0, 0, 0},
		{"negative wait", 0, -1, 0, ErrUnsupportedDuration, 0, 0, 0},
		{"huge wait", 0, math.MaxInt64, 0, ErrUnsupportedDuration, 0, 0, 0},
		{"lease 1 ns is 1 s", 0, 0, 1, nil, 0, 1, 0},
		{"lease 3600 s", 0, 0, 3600 * s, nil, 0, 3600, 0},
		{"lease 3600 s + 1 ns", 0, 0, 3600*s + 1, ErrUnsupportedDuration, 0, 0, 0},
		{"negative lease", 0, 0, -s, ErrUnsupportedDuration, 0, 0, 0},
		{"budget rounds up", 1, 0, 0, nil, 0, 30, s},
		{"budget equals lease", 30 * s, 0, 0, nil, 0, 30, 30 * s},
		{"budget 250 s", 250 * s, 0, time.Hour, nil, 0, 3600, 250 * s},
		{"budget 250 s + 1 ns", 250*s + 1, 0, time.Hour, ErrUnsupportedDuration, 0, 0, 0},
		{"negative budget", -1, 0, 0, ErrUnsupportedDuration, 0, 0, 0},
		{"budget over default lease", 30*s + 1, 0, 0, ErrInsufficientLease, 0, 0, 0},
		{"budget over rounded lease", 3 * s, 0, 1500 * time.Millisecond, ErrInsufficientLease, 0, 0, 0},
		{"budget within rounded lease", 2 * s, 0, 1500 * time.Millisecond, nil, 0, 2, 2 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := normalize("k", tc.budget, AcquireOptions{Wait: tc.wait, Lease: tc.lease})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && (r.wait != tc.w || r.lease != tc.l || r.budget != tc.budgetOut) {
				t.Fatalf("got wait %d lease %d budget %v, want %d %d %v", r.wait, r.lease, r.budget, tc.w, tc.l, tc.budgetOut)
			}
			// CheckAcquire, the rule exported for callers that check inputs first (cmd/latch),
			// is the same rule.
			d, derr := CheckAcquire(tc.budget, AcquireOptions{Wait: tc.wait, Lease: tc.lease})
			if !errors.Is(derr, tc.want) || (derr == nil) != (err == nil) ||
				err == nil && d != (Durations{Wait: time.Duration(tc.w) * s, Lease: time.Duration(tc.l) * s, Budget: tc.budgetOut}) {
				t.Fatalf("CheckAcquire: %+v, %v; want the durations normalize sends and its error %v", d, derr, err)
			}
		})
	}
}

func TestNormalizeKeys(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want error
	}{
		{strings.Repeat("к", 64), nil},                // 128 bytes of Cyrillic
		{strings.Repeat("к", 65), wire.ErrKeyTooLong}, // 130 bytes
		{strings.Repeat("가", 42), nil},                // 126 bytes of Korean
		{strings.Repeat("가", 43), wire.ErrKeyTooLong}, // 129 bytes
		{"name\r", wire.ErrKeyCR},
		{"a\tb", wire.ErrKeyWhitespace},
		{"a\x0bb", wire.ErrKeyWhitespace},
		{"", wire.ErrKeyEmpty},
		{"\xc3", wire.ErrKeyNotUTF8},
	} {
		_, err := normalize(tc.key, 0, AcquireOptions{})
		if cerr := CheckKey(tc.key); (cerr == nil) != (err == nil) || err != nil && cerr.Error() != err.Error() {
			t.Errorf("key %q: CheckKey %v, normalize %v: want the same rule", tc.key, cerr, err)
		}
		if tc.want == nil {
			if err != nil {
				t.Errorf("key %q: %v", tc.key, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadKey) || !errors.Is(err, tc.want) {
			t.Errorf("key %q: %v, want ErrBadKey and %v", tc.key, err, tc.want)
		}
	}
}

func TestOwnersNeverWrap(t *testing.T) {
	var o owners
	o.next.Store(math.MaxUint64 - 2)
	for _, want := range []uint64{math.MaxUint64 - 2, math.MaxUint64 - 1, math.MaxUint64} {
		if got, ok := o.take(); !ok || got != want {
			t.Fatalf("take = %d %v, want %d", got, ok, want)
		}
	}
	for range 3 {
		if got, ok := o.take(); ok {
			t.Fatalf("take after the last owner = %d", got)
		}
	}
	if !o.exhausted() {
		t.Fatal("not exhausted")
	}
}

func TestServerErrorIs(t *testing.T) {
	for _, tc := range []struct {
		reason wire.Reason
		want   error
	}{
		{wire.ReasonUnavailable, ErrUnavailable},
		{wire.ReasonIndeterminate, ErrIndeterminate},
		{wire.ReasonTokenExhausted, ErrTokenExhausted},
		{wire.ReasonBadKey, ErrBadKey},
		{wire.ReasonAuthFailed, ErrAuth},
		{wire.ReasonBadVersion, ErrAuth},
		{wire.ReasonAuthRequired, ErrAuth},
		{wire.ReasonBadOwner, nil},
		{wire.ReasonBadRange, nil},
		{wire.ReasonInternal, nil},
		{wire.ReasonBadRequest, nil},
	} {
		err := error(&ServerError{Reason: tc.reason})
		for _, s := range []error{ErrUnavailable, ErrIndeterminate, ErrTokenExhausted, ErrBadKey, ErrAuth, ErrTimeout, ErrBusy} {
			if errors.Is(err, s) != (s == tc.want) {
				t.Errorf("E %s: errors.Is(%v) = %v", tc.reason, s, !(s == tc.want))
			}
		}
		if !strings.Contains(err.Error(), string(tc.reason)) {
			t.Errorf("E %s: message %q", tc.reason, err)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	dir := t.TempDir()
	writable := dir + "/writable"
	if err := os.WriteFile(writable, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no servers", Config{}, "no servers"},
		{"not host:port", Config{Servers: []string{"localhost"}}, "host:port"},
		{"short secret", Config{Servers: []string{"a:1"}, Secret: []byte("short")}, "shorter than 32"},
		{"both secrets", Config{Servers: []string{"a:1"}, Secret: secretOne, SecretFile: "x"}, "use one"},
		{"missing secret file", Config{Servers: []string{"a:1"}, SecretFile: dir + "/none"}, "secret file"},
		{"secret file others may write", Config{Servers: []string{"a:1"}, SecretFile: writable}, "chmod 600"},
		{"negative conns", Config{Servers: []string{"a:1"}, Conns: -1}, "Conns"},
		{"negative dial timeout", Config{Servers: []string{"a:1"}, DialTimeout: -1}, "DialTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := New(tc.cfg)
			if err == nil {
				cl.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// No grant carries token 0 or one above wire.MaxToken: CheckToken refuses exactly those.
func TestCheckToken(t *testing.T) {
	for tok, ok := range map[uint64]bool{0: false, 1: true, wire.MaxToken: true, wire.MaxToken + 1: false, math.MaxUint64: false} {
		if err := CheckToken(tok); (err == nil) != ok || err != nil && !errors.Is(err, ErrNotHeld) {
			t.Errorf("CheckToken(%d) = %v, want ok %v (ErrNotHeld otherwise)", tok, err, ok)
		}
	}
}
