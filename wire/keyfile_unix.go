//go:build unix

package wire

import (
	"io/fs"
	"os"
	"syscall"
)

// ownedByMe reports whether this process's effective user owns the file.
func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == uint32(os.Geteuid())
}
