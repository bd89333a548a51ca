package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// KeyText is how a key is written where people read it (the CLI's tables and messages): the
// key itself when every character of it prints as itself, otherwise the key in double quotes
// with Go's escapes (strconv.Quote): control characters (ESC, NUL, CR, ...), format
// characters (bidirectional overrides such as U+202E, zero-width ones) and spaces other than
// ASCII's (U+00A0 and the like) become \x1b, \x00, \u202e, \u00a0, ...; a key that holds a
// double quote or a backslash is quoted too, so that a quoted text never reads as a key. So
// nothing a client names a key can reach a terminal as anything but visible text, and
// ParseKeyText gives back the key from either form.
func KeyText(k string) string {
	q := strconv.Quote(k)
	if q[1:len(q)-1] == k && !strings.HasPrefix(k, `"`) {
		return k
	}
	return q
}

// ParseKeyText reads a key given as KeyText writes it: a text that starts with a double quote
// is a quoted key (Go's escapes, as KeyText writes them, or any strconv.Unquote accepts);
// any other text is the key itself. The key rules are the caller's to check.
func ParseKeyText(s string) (string, error) {
	if !strings.HasPrefix(s, `"`) {
		return s, nil
	}
	k, err := strconv.Unquote(s)
	if err != nil {
		return "", fmt.Errorf("key %s starts with a double quote but is not a quoted key (Go's escapes: \"a\\x00b\"; "+
			"a key that starts with a double quote is written \"\\\"...\"): %w", s, err)
	}
	return k, nil
}
