package wire

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrKeyFileWritable is ReadKeyFile's refusal of a file that its group or others may write:
// whoever can change a secret or key file decides who is trusted.
var ErrKeyFileWritable = errors.New("writable by its group or by others")

// ErrKeyFileOwner is ReadKeyFile's refusal of a file (or its directory) that a process
// running as root finds owned by another user, who could change what root trusts.
var ErrKeyFileOwner = errors.New("owned by another user than root")

// ReadKeyFile reads a secret file or private key file, the one rule for both the server and
// the client library. It refuses a file that its group or others may write (an error that
// is ErrKeyFileWritable and names the fix), and reports as exposed one that others than its
// owner may read: by everyone, or by its group when this process owns it. A group-readable
// file this process does not own is how a Kubernetes Secret volume (root-owned, read through
// fsGroup) is meant to be read, so that one is not exposed. Exposed is for a warning. It also
// refuses a file whose owner or directory lets someone else change it (checkPlace: a root
// process and a file of another user, a directory others may write without the sticky bit).
func ReadKeyFile(path string) (data []byte, exposed bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if exposed, err = CheckKeyMode(path, fi.Mode().Perm(), ownedByMe(fi)); err != nil {
		return nil, false, err
	}
	if err := checkPlace(path, fi); err != nil {
		return nil, false, err
	}
	if data, err = io.ReadAll(f); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return data, exposed, nil
}

// CheckKeyMode is ReadKeyFile's rule on the permission bits of path; mine is whether this
// process owns the file.
func CheckKeyMode(path string, perm fs.FileMode, mine bool) (exposed bool, err error) {
	if perm&0o022 != 0 {
		return false, fmt.Errorf("%s: %w (mode %04o): whoever can change it decides who is trusted; fix it with `chmod 600 %s` "+
			"(or `chmod 640` when the server reads it through its group)", path, ErrKeyFileWritable, perm, path)
	}
	return perm&0o004 != 0 || perm&0o040 != 0 && mine, nil
}
