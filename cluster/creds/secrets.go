package creds

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/wire"
)

// SecretFiles name the secret files of the three principals ("" is none).
type SecretFiles struct {
	Client string // --secret-file
	Peer   string // --peer-secret-file
	Admin  string // --admin-secret-file
	// AllowShared (--allow-shared-secrets) lets two files hold the same secret, with a
	// warning: a step of the move from one secret to three, never a place to stay.
	AllowShared bool
}

// Secrets are the secrets of a server, one list per principal (each nil when its file is not
// given; otherwise at least one secret, the first used to prove, all accepted).
type Secrets struct {
	Client, Peer, Admin [][]byte
}

// ErrSharedSecret is LoadSecrets' refusal of a secret that two principals' files share
// without SecretFiles.AllowShared.
var ErrSharedSecret = errors.New("a secret is in two secret files")

// LoadSecrets reads the three secret files. A secret that two of them share is refused
// (ErrSharedSecret, naming both flags), or with files.AllowShared warned about on log.
func LoadSecrets(files SecretFiles, log hclog.Logger) (Secrets, error) {
	var s Secrets
	var err error
	for _, f := range []struct {
		flag, file string
		to         *[][]byte
	}{{"secret-file", files.Client, &s.Client}, {"peer-secret-file", files.Peer, &s.Peer}, {"admin-secret-file", files.Admin, &s.Admin}} {
		if *f.to, err = ReadSecrets(f.flag, f.file, log); err != nil {
			return s, err
		}
	}
	if files.AllowShared {
		warnShared(log, s)
		return s, nil
	}
	if a, b, ok := shared(s); ok {
		return s, fmt.Errorf("%s and %s: %w: whoever holds it passes for both principals (with the client's, a client could speak Raft "+
			"to the nodes or sign admin calls); give each file its own secret, or pass --allow-shared-secrets for the rolls of the move "+
			"from one secret to three (deploy/README.md, \"From one secret to three\")", a, b, ErrSharedSecret)
	}
	return s, nil
}

// ReadSecrets reads the secret file that flag names ("" is none): one secret a line
// (wire.ParseSecrets). log nil: no warning about a file others may read.
func ReadSecrets(flag, file string, log hclog.Logger) ([][]byte, error) {
	if file == "" {
		return nil, nil
	}
	data, err := ReadKeyFile(flag, file, log)
	if err != nil {
		return nil, err
	}
	s, err := wire.ParseSecrets(data)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, file, err)
	}
	return s, nil
}

// ReadSecret is the first secret of the file that flag names (the one a client proves), or
// nil when it names none; log nil: no warning about a file others may read.
func ReadSecret(flag, file string, log hclog.Logger) ([]byte, error) {
	s, err := ReadSecrets(flag, file, log)
	if len(s) == 0 {
		return nil, err
	}
	return s[0], nil
}

// warnShared logs, once per pair, a secret that two principals share: then one of them can
// pass for the other. That is a step of the upgrade from one secret to three (the peer and
// admin files start with the old shared secret), never a place to stay.
func warnShared(log hclog.Logger, s Secrets) {
	for _, p := range sharedPairs(s) {
		log.Warn("a secret is in two secret files: whoever holds it passes for both principals; finish the move to "+
			"separate secrets (deploy/README.md, \"From one secret to three\")", "files", p[0]+" "+p[1])
	}
}

// shared names the first two flags whose files share a secret.
func shared(s Secrets) (a, b string, ok bool) {
	if ps := sharedPairs(s); len(ps) > 0 {
		return ps[0][0], ps[0][1], true
	}
	return "", "", false
}

// sharedPairs lists the pairs of flags whose files share a secret.
func sharedPairs(s Secrets) [][2]string {
	lists := []struct {
		flag string
		s    [][]byte
	}{{"--secret-file", s.Client}, {"--peer-secret-file", s.Peer}, {"--admin-secret-file", s.Admin}}
	var out [][2]string
	for i := range lists {
		for j := i + 1; j < len(lists); j++ {
			if shareOne(lists[i].s, lists[j].s) {
				out = append(out, [2]string{lists[i].flag, lists[j].flag})
			}
		}
	}
	return out
}

func shareOne(a, b [][]byte) bool {
	for _, x := range a {
		for _, y := range b {
			if bytes.Equal(x, y) {
				return true
			}
		}
	}
	return false
}

// ReadKeyFile reads a secret or private key file named by flag (wire.ReadKeyFile: a file
// its group or others may write is refused) and, when log is set, warns once when others
// than its owner may read it.
func ReadKeyFile(flag, file string, log hclog.Logger) ([]byte, error) {
	data, exposed, err := wire.ReadKeyFile(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	warnExposed(flag, file, exposed, log)
	return data, nil
}

// ErrKeyFileWritable is ReadKeyFile's refusal of a file that others may write.
var ErrKeyFileWritable = wire.ErrKeyFileWritable

// CheckKeyMode is ReadKeyFile's rule on a file's permission bits (wire.CheckKeyMode), with
// its warning.
func CheckKeyMode(flag, file string, perm os.FileMode, mine bool, log hclog.Logger) error {
	exposed, err := wire.CheckKeyMode(file, perm, mine)
	if err != nil {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	warnExposed(flag, file, exposed, log)
	return nil
}

func warnExposed(flag, file string, exposed bool, log hclog.Logger) {
	if exposed && log != nil {
		log.Warn("a secret or key file is readable by others than its owner", "flag", "--"+flag, "file", file, "fix", "chmod 600 "+file)
	}
}
