package wire

import (
	"bytes"
	"errors"
	"fmt"
)

// Secret file errors, wrapped with the line number by ParseSecrets.
var (
	ErrSecretTooShort = errors.New("secret is shorter than 32 bytes; generate a longer one, e.g. with `openssl rand -hex 32`")
	ErrNoSecrets      = errors.New("wire: secret file holds no secret; put one secret of at least 32 bytes per line")
)

// ParseSecrets reads a secret file (section 8): one secret per line, ASCII
// whitespace around it (space, tab, CR, VT, FF) trimmed, blank lines skipped.
// Each secret must be at least MinSecretLen bytes and there must be at least
// one. The server accepts any of them; clients use the first. Errors name
// the line, never the content. The secrets returned are copies of data.
func ParseSecrets(data []byte) ([][]byte, error) {
	var secrets [][]byte
	for line := 1; len(data) > 0; line++ {
		s, rest, _ := bytes.Cut(data, []byte{'\n'})
		data = rest
		s = bytes.Trim(s, " \t\r\v\f")
		if len(s) == 0 {
			continue
		}
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("wire: secret file line %d: %w", line, ErrSecretTooShort)
		}
		secrets = append(secrets, bytes.Clone(s))
	}
	if len(secrets) == 0 {
		return nil, ErrNoSecrets
	}
	return secrets, nil
}
