//go:build unix

package wire

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ownedByMe reports whether this process's effective user owns the file.
func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == uint32(os.Geteuid())
}

// uidOf is the file's owner, or -1 where the system does not say.
func uidOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Uid)
	}
	return -1
}

// checkPlace is ReadKeyFile's rule on who else could change the file than its mode says:
//
//   - a process running as root reads only files that root owns (another owner could rewrite
//     what root trusts; a process of another user reads a file it does not own only through
//     its group or others bits, which is how container secrets are meant to be read);
//   - the directory holding it (as named, and where its symbolic links lead) must not be
//     writable by its group or by others unless it has the sticky bit (as /tmp and a
//     Kubernetes Secret volume have): otherwise they could put another file in its place;
//     for a root process that directory must be root's too.
func checkPlace(path string, fi fs.FileInfo) error {
	root := os.Geteuid() == 0
	if uid := uidOf(fi); root && uid > 0 {
		return fmt.Errorf("%s: %w (uid %d) while this process runs as root: that user decides who is trusted; "+
			"fix it with `chown root %s`", path, ErrKeyFileOwner, uid, path)
	}
	dirs := []string{filepath.Dir(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && filepath.Dir(real) != dirs[0] {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, dir := range dirs {
		di, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		mode := di.Mode()
		if mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0 {
			return fmt.Errorf("%s: its directory %s is %w (mode %04o, no sticky bit), so they can put another file in its place; "+
				"fix it with `chmod go-w %s`, or keep the file in a directory of its own", path, dir, ErrKeyFileWritable, mode.Perm(), dir)
		}
		if uid := uidOf(di); root && uid > 0 {
			return fmt.Errorf("%s: its directory %s is %w (uid %d) while this process runs as root: that user can "+
				"put another file in its place; fix it with `chown root %s`", path, dir, ErrKeyFileOwner, uid, dir)
		}
	}
	return nil
}
