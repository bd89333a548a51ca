package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckKey(t *testing.T) {
	tests := []struct {
		key       string
		server    error // CheckKey
		client    error // CheckClientKey
		reasonBad bool
	}{
		{"a", nil, nil, false},
		{"orders/42", nil, nil, false},
		{"ключ", nil, nil, false},
		{"🔒", nil, nil, false},
		{strings.Repeat("k", MaxKey), nil, nil, false},
		{cyrillic64, nil, nil, false},
		{korean42, nil, nil, false},
		{"", ErrKeyEmpty, ErrKeyEmpty, true},
		{strings.Repeat("k", MaxKey+1), ErrKeyTooLong, ErrKeyTooLong, true},
		{cyrillic65, ErrKeyTooLong, ErrKeyTooLong, true},
		{korean43, ErrKeyTooLong, ErrKeyTooLong, true},
		{strings.Repeat("k", 180), ErrKeyTooLong, ErrKeyTooLong, true},
		{"a b", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{" ", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{"a\t", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{"\va", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{"a\fb", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{"a\nb", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{"ключ с пробелом", ErrKeyWhitespace, ErrKeyWhitespace, true},
		{"name\r", nil, ErrKeyCR, false},
		{"a\rb", nil, ErrKeyCR, false},
		{"\xff", ErrKeyNotUTF8, ErrKeyNotUTF8, true},
		{"ok\xc3", ErrKeyNotUTF8, ErrKeyNotUTF8, true},           // cut sequence
		{"\xc0\xaf", ErrKeyNotUTF8, ErrKeyNotUTF8, true},         // overlong '/'
		{"\xed\xa0\x80", ErrKeyNotUTF8, ErrKeyNotUTF8, true},     // surrogate
		{"\xf4\x90\x80\x80", ErrKeyNotUTF8, ErrKeyNotUTF8, true}, // above U+10FFFF
		{"\x00", nil, nil, false},                                // control bytes other than whitespace are allowed
		{"\u00a0", nil, nil, false},                              // only ASCII whitespace is forbidden
	}
	for _, tc := range tests {
		if err := CheckKey([]byte(tc.key)); err != tc.server {
			t.Errorf("CheckKey(%q) = %v, want %v", tc.key, err, tc.server)
		}
		if err := CheckClientKey(tc.key); err != tc.client {
			t.Errorf("CheckClientKey(%q) = %v, want %v", tc.key, err, tc.client)
		}
		r := Request{Op: OpRelease, Owner: 1, Key: []byte(tc.key)}
		if got := r.Check() == ReasonBadKey; got != tc.reasonBad {
			t.Errorf("release with key %q: Check() = %q", tc.key, r.Check())
		}
	}
}

func TestKeyErrorsSayWhatIsAllowed(t *testing.T) {
	for _, err := range []error{ErrKeyEmpty, ErrKeyTooLong, ErrKeyNotUTF8, ErrKeyWhitespace, ErrKeyCR} {
		if !strings.HasPrefix(err.Error(), "wire: key ") {
			t.Errorf("%q does not start with \"wire: key \"", err)
		}
	}
	if !errors.Is(CheckKey(nil), ErrKeyEmpty) {
		t.Error("CheckKey(nil) is not ErrKeyEmpty")
	}
}
