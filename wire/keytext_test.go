package wire

import (
	"strings"
	"testing"
	"unicode"
)

// Every key a client can hold is written with nothing a terminal would act on, and reads
// back as itself; a key that prints as itself stays as it is.
func TestKeyText(t *testing.T) {
	for _, c := range []struct{ key, text string }{
		{"jobs/nightly", "jobs/nightly"},
		{"café", "café"},
		{"x\x1b]0;PWNED\a\x1b[2J", `"x\x1b]0;PWNED\a\x1b[2J"`},
		{"\x1b]52;c;aGk=\a", `"\x1b]52;c;aGk=\a"`},
		{"\u202eexe.txt", `"\u202eexe.txt"`},
		{"a\u00a0b", `"a\u00a0b"`},
		{"a\u200bb", `"a\u200bb"`},
		{"a\x00b", `"a\x00b"`},
		{"line\r", `"line\r"`},
		{`say"hi"`, `"say\"hi\""`},
		{`"quoted"`, `"\"quoted\""`},
		{`back\slash`, `"back\\slash"`},
	} {
		got := KeyText(c.key)
		if got != c.text {
			t.Errorf("KeyText(%q) = %s, want %s", c.key, got, c.text)
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f || unicode.Is(unicode.Cf, r) || (unicode.IsSpace(r) && r != ' ') {
				t.Errorf("KeyText(%q) = %q holds %U", c.key, got, r)
			}
		}
		back, err := ParseKeyText(got)
		if err != nil || back != c.key {
			t.Errorf("ParseKeyText(%s) = %q, %v; want %q", got, back, err, c.key)
		}
	}
	if _, err := ParseKeyText(`"unterminated`); err == nil || !strings.Contains(err.Error(), "not a quoted key") {
		t.Errorf("a bad quoted key: %v", err)
	}
}
