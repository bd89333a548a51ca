package faultfs

import (
	"context"
	"path/filepath"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is go-fuse's loopback node with the fault filesystem's bookkeeping around the calls
// that create, truncate, rename and sync; every child it makes is one too (WrapChild).
type node struct {
	*gofs.LoopbackNode
	ffs *FS
}

var (
	_ gofs.NodeWrapChilder    = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeFsyncer        = (*node)(nil)
	_ gofs.NodeRenamer        = (*node)(nil)
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.NodeMkdirer        = (*node)(nil)
	_ gofs.NodeUnlinker       = (*node)(nil)
	_ gofs.NodeRmdirer        = (*node)(nil)
)

func (n *node) WrapChild(_ context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*gofs.LoopbackNode), ffs: n.ffs}
}

// path is the node's path in the backing directory.
func (n *node) path() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

// inode is the backing inode number of path (0 if it cannot be read).
func inode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// truncatingPath records that the file at path is about to get size size.
func (n *node) truncatingPath(path string, size int64) {
	fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
	if err != nil {
		return // nothing there to lose
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		n.ffs.truncating(fd, st.Ino, size)
	}
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.ffs.dead() {
		return nil, nil, 0, syscall.EIO
	}
	p := filepath.Join(n.path(), name)
	existed := inode(p) != 0
	if existed && flags&syscall.O_TRUNC != 0 {
		n.truncatingPath(p, 0)
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return ch, fh, fuseFlags, errno
	}
	f := newFile(n.ffs, fh)
	if !existed {
		n.ffs.created(f.ino, inode(n.path()))
	}
	return ch, f, fuseFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 && n.ffs.dead() {
		return nil, 0, syscall.EIO
	}
	if flags&syscall.O_TRUNC != 0 {
		n.truncatingPath(n.path(), 0)
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, fuseFlags, errno
	}
	return newFile(n.ffs, fh), fuseFlags, 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.ffs.dead() {
		return syscall.EIO
	}
	if f, ok := fh.(*file); ok {
		fh = f.lf // the loopback file does the change; the size is recorded here
	}
	if size, ok := in.GetSize(); ok {
		n.truncatingPath(n.path(), int64(size))
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// Fsync is FUSE's FSYNC, for files (directories come through dir.Fsyncdir).
func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if f, ok := fh.(*file); ok {
		return f.Fsync(ctx, flags)
	}
	fd, err := syscall.Open(n.path(), syscall.O_RDONLY, 0)
	if err != nil {
		return gofs.ToErrno(err)
	}
	defer syscall.Close(fd)
	return n.ffs.fsync(fd)
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.ffs.dead() {
		return syscall.EIO
	}
	if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
		return errno
	}
	if np, ok := newParent.(*node); ok {
		dir := np.path()
		n.ffs.renamed(inode(filepath.Join(dir, newName)), inode(dir))
	}
	return 0
}

// Mkdir, Unlink and Rmdir are durable at once (doc.go); after PowerOff they fail.

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.ffs.dead() {
		return nil, syscall.EIO
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.ffs.dead() {
		return syscall.EIO
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.ffs.dead() {
		return syscall.EIO
	}
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, fuseFlags, errno
	}
	return &dir{ds: fh, ffs: n.ffs, path: n.path()}, fuseFlags, 0
}

// fsync is a file's fsync: the fault first, then the backing fsync, then the bookkeeping.
func (f *FS) fsync(fd int) syscall.Errno {
	if errno := f.fault(); errno != 0 {
		return errno
	}
	if err := syscall.Fsync(fd); err != nil {
		return gofs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return gofs.ToErrno(err)
	}
	f.synced(fd, st.Ino)
	return 0
}

// file is an open file: go-fuse's loopback file, with writes, truncations and syncs
// recorded. It deliberately does not offer go-fuse's passthrough (FilePassthroughFder): the
// kernel would then read and write the backing file without asking the filesystem.
type file struct {
	lf  *gofs.LoopbackFile
	ffs *FS
	fd  int
	ino uint64
}

var (
	_ gofs.FileReader    = (*file)(nil)
	_ gofs.FileWriter    = (*file)(nil)
	_ gofs.FileGetattrer = (*file)(nil)
	_ gofs.FileSetattrer = (*file)(nil)
	_ gofs.FileAllocater = (*file)(nil)
	_ gofs.FileFlusher   = (*file)(nil)
	_ gofs.FileReleaser  = (*file)(nil)
	_ gofs.FileFsyncer   = (*file)(nil)
	_ gofs.FileLseeker   = (*file)(nil)
	_ gofs.FileGetlker   = (*file)(nil)
	_ gofs.FileSetlker   = (*file)(nil)
	_ gofs.FileSetlkwer  = (*file)(nil)
)

func newFile(ffs *FS, fh gofs.FileHandle) *file {
	lf := fh.(*gofs.LoopbackFile)
	fd, _ := lf.PassthroughFd() // the descriptor only: nothing is handed to the kernel
	var st syscall.Stat_t
	_ = syscall.Fstat(fd, &st)
	return &file{lf: lf, ffs: ffs, fd: fd, ino: st.Ino}
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if f.ffs.dead() {
		return 0, syscall.EIO
	}
	f.ffs.changing(f.fd, f.ino, off, int64(len(data)))
	return f.lf.Write(ctx, data, off)
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if f.ffs.dead() {
		return syscall.EIO
	}
	if size, ok := in.GetSize(); ok {
		f.ffs.truncating(f.fd, f.ino, int64(size))
	}
	return f.lf.Setattr(ctx, in, out)
}

// Allocate records the range a hole punch or zeroing changes; a plain allocation changes
// no byte that was there.
func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if f.ffs.dead() {
		return syscall.EIO
	}
	const punchHole, zeroRange = 0x02, 0x10 // FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE
	if mode&(punchHole|zeroRange) != 0 {
		f.ffs.changing(f.fd, f.ino, int64(off), int64(size))
	}
	return f.lf.Allocate(ctx, off, size, mode)
}

func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }
func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }

func (f *file) Fsync(_ context.Context, _ uint32) syscall.Errno { return f.ffs.fsync(f.fd) }

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.lf.Getlk(ctx, owner, lk, flags, out)
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlk(ctx, owner, lk, flags)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlkw(ctx, owner, lk, flags)
}

// dir is an open directory: go-fuse's loopback directory stream, with its fsync faulted and
// recorded (it makes the names in it durable).
type dir struct {
	ds   gofs.FileHandle
	ffs  *FS
	path string
}

var (
	_ gofs.FileReaddirenter = (*dir)(nil)
	_ gofs.FileSeekdirer    = (*dir)(nil)
	_ gofs.FileReleasedirer = (*dir)(nil)
	_ gofs.FileFsyncdirer   = (*dir)(nil)
)

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(gofs.FileReaddirenter).Readdirent(ctx)
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(gofs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(gofs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if errno := d.ffs.fault(); errno != 0 {
		return errno
	}
	if errno := d.ds.(gofs.FileFsyncdirer).Fsyncdir(ctx, flags); errno != 0 {
		return errno
	}
	d.ffs.dirSynced(inode(d.path))
	return 0
}
