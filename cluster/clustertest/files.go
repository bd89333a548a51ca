package clustertest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// CopyDir copies the tree src to dst (which must not exist) as cp -a would: directories,
// regular files and their modes. Runs of zeros are left as holes, so that raft-wal's
// preallocated 64 MiB segment copies fast; they read back as zeros.
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copySparse(path, to, info)
		default:
			return fmt.Errorf("%s: not a directory or regular file", path)
		}
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

func copySparse(src, dst string, info os.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
	if err != nil {
		return err
	}
	buf, zero := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 && bytes.Equal(buf[:n], zero[:n]) {
			_, serr := out.Seek(int64(n), io.SeekCurrent)
			err = errors.Join(err, serr)
		} else if n > 0 {
			_, werr := out.Write(buf[:n])
			err = errors.Join(err, werr)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Truncate(info.Size()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ReplaceDir makes dir a copy of pristine again (CopyDir after removing dir).
func ReplaceDir(t testing.TB, pristine, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	CopyDir(t, pristine, dir)
}
