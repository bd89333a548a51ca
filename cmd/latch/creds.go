package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/wire"
)

// Three principals, three credentials (docs/SECURITY.md):
//
//	clients   --secret-file        the client port, nothing else
//	peers     --peer-secret-file   the peer port (and a node's own join over --http);
//	          and/or mutual TLS    certificates of --tls-ca
//	operator  --admin-secret-file  every admin call over --http;
//	          and/or certificates of --admin-tls-ca, over --http-tls
//
// Every secret file and key file is read by readKeyFile, which refuses one that its group
// or others may write.

// credentials are the secrets of a server, one list per principal (each nil when its flag
// is not given; otherwise at least one secret, the first used to prove, all accepted).
type credentials struct {
	client, peer, admin [][]byte
}

// loadCredentials reads --secret-file, --peer-secret-file and --admin-secret-file.
func loadCredentials(c *cli.Context, log hclog.Logger) (credentials, error) {
	var cr credentials
	var err error
	for _, f := range []struct {
		flag string
		to   *[][]byte
	}{{"secret-file", &cr.client}, {"peer-secret-file", &cr.peer}, {"admin-secret-file", &cr.admin}} {
		if *f.to, err = readSecrets(f.flag, c.String(f.flag), log); err != nil {
			return cr, err
		}
	}
	warnShared(log, cr)
	return cr, nil
}

// readSecrets reads the secret file that flag names ("" is none).
func readSecrets(flag, file string, log hclog.Logger) ([][]byte, error) {
	if file == "" {
		return nil, nil
	}
	data, err := readKeyFile(flag, file, log)
	if err != nil {
		return nil, err
	}
	s, err := wire.ParseSecrets(data)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, file, err)
	}
	return s, nil
}

// warnShared logs, once per pair, a secret that two principals share: then one of them can
// pass for the other. That is a step of the upgrade from one secret to three (the peer and
// admin files start with the old shared secret), never a place to stay.
func warnShared(log hclog.Logger, cr credentials) {
	lists := []struct {
		flag string
		s    [][]byte
	}{{"--secret-file", cr.client}, {"--peer-secret-file", cr.peer}, {"--admin-secret-file", cr.admin}}
	for i := range lists {
		for j := i + 1; j < len(lists); j++ {
			if shareOne(lists[i].s, lists[j].s) {
				log.Warn("a secret is in two secret files: whoever holds it passes for both principals; finish the move to "+
					"separate secrets (deploy/README.md, \"From one secret to three\")", "files", lists[i].flag+" "+lists[j].flag)
			}
		}
	}
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

// readKeyFile reads a secret or private key file named by flag (wire.ReadKeyFile: a file
// its group or others may write is refused) and, when log is set, warns once when others
// than its owner may read it.
func readKeyFile(flag, file string, log hclog.Logger) ([]byte, error) {
	data, exposed, err := wire.ReadKeyFile(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	warnExposed(flag, file, exposed, log)
	return data, nil
}

// ErrKeyFileWritable is readKeyFile's refusal of a file that others may write.
var ErrKeyFileWritable = wire.ErrKeyFileWritable

// checkKeyMode is readKeyFile's rule on a file's permission bits (wire.CheckKeyMode), with
// its warning.
func checkKeyMode(flag, file string, perm os.FileMode, mine bool, log hclog.Logger) error {
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
