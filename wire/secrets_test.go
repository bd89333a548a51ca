package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSecrets(t *testing.T) {
	s1 := strings.Repeat("a", MinSecretLen)
	s2 := "second secret with inner spaces, 40 byte"
	tests := []struct {
		name string
		file string
		want []string
		err  error
		line string // must appear in the error
	}{
		{"one", s1 + "\n", []string{s1}, nil, ""},
		{"no final newline", s1, []string{s1}, nil, ""},
		{"two in order", s1 + "\n" + s2 + "\n", []string{s1, s2}, nil, ""},
		{"CRLF", s1 + "\r\n" + s2 + "\r\n", []string{s1, s2}, nil, ""},
		{"blank lines and padding", "\n  \r\n\t" + s1 + " \n\n\r\n" + s2 + "\n\n", []string{s1, s2}, nil, ""},
		{"empty file", "", nil, ErrNoSecrets, ""},
		{"only blank lines", "\n \r\n\t\n", nil, ErrNoSecrets, ""},
		{"short secret", s1 + "\n\nshort-secret\n", nil, ErrSecretTooShort, "line 3"},
		{"short after trim", " " + s1[:MinSecretLen-1] + "\r\n", nil, ErrSecretTooShort, "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSecrets([]byte(tc.file))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.line) {
					t.Errorf("error %q does not name %q", err, tc.line)
				}
				if strings.Contains(err.Error(), "short-secret") || strings.Contains(err.Error(), s1[:20]) {
					t.Errorf("error %q shows the secret", err)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d secrets, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if string(got[i]) != tc.want[i] {
					t.Errorf("secret %d = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseSecretsCopies(t *testing.T) {
	data := []byte(strings.Repeat("s", MinSecretLen) + "\n")
	got, err := ParseSecrets(data)
	if err != nil {
		t.Fatal(err)
	}
	clear(data)
	if got[0][0] != 's' {
		t.Fatal("secret aliases the file data")
	}
}
