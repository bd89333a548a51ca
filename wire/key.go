package wire

import (
	"errors"
	"unicode/utf8"
)

// Key errors. The server answers any of them with E bad_key; the official
// client returns them before sending anything.
var (
	ErrKeyEmpty      = errors.New("wire: key is empty; a key is 1..128 bytes of UTF-8")
	ErrKeyTooLong    = errors.New("wire: key is longer than 128 bytes; length counts bytes, not characters")
	ErrKeyNotUTF8    = errors.New("wire: key is not valid UTF-8")
	ErrKeyWhitespace = errors.New("wire: key contains whitespace (space, tab, LF, VT or FF); use another separator such as '/' or '_'")
	ErrKeyCR         = errors.New("wire: key contains CR (0x0D); the official client refuses it, strip line endings from the key")
)

// CheckKey applies the server's key rules (section 4): 1..MaxKey bytes of
// valid UTF-8 without space, tab, LF, VT or FF. CR is allowed.
func CheckKey(k []byte) error {
	ascii, err := scanKey(k, false)
	if err == nil && !ascii && !utf8.Valid(k) {
		err = ErrKeyNotUTF8
	}
	return err
}

// CheckClientKey applies the official client's key rules: those of
// CheckKey, and no CR, so that a key read with a stray line ending is not
// silently a different key.
func CheckClientKey(k string) error {
	ascii, err := scanKey(k, true)
	if err == nil && !ascii && !utf8.ValidString(k) {
		err = ErrKeyNotUTF8
	}
	return err
}

// scanKey checks the length and the ASCII rules of a key and reports whether
// it is all ASCII (then it needs no UTF-8 check). Every forbidden byte is
// ASCII, and an ASCII byte never occurs inside a UTF-8 sequence, so a byte
// scan is exact.
func scanKey[K string | []byte](k K, refuseCR bool) (ascii bool, err error) {
	if len(k) == 0 {
		return true, ErrKeyEmpty
	}
	if len(k) > MaxKey {
		return false, ErrKeyTooLong
	}
	var high byte
	for i := 0; i < len(k); i++ {
		c := k[i]
		high |= c
		switch c {
		case ' ', '\t', '\n', '\v', '\f':
			return false, ErrKeyWhitespace
		case '\r':
			if refuseCR {
				return false, ErrKeyCR
			}
		}
	}
	return high < utf8.RuneSelf, nil
}
