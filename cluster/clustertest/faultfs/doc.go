// Package faultfs is test support only: a passthrough FUSE filesystem over a backing
// directory that fails, slows or forgets the writes of whoever uses it, for tests that run
// latch nodes with their --data-dir on it. The idea is Jepsen's LazyFS and CharybdeFS; the
// code is ours, on github.com/hanwen/go-fuse/v2 (its loopback nodes, wrapped).
//
// # Faults
//
//   - FailFsync(errno): every fsync and fdatasync, of files and of directories, answers
//     errno (syscall.EIO) until FailFsync(0). Nothing becomes durable by a failed fsync; the
//     writes before it stay readable, as they do in a kernel's page cache.
//   - DelayFsync(min, max): every fsync first sleeps a random time in [min, max].
//   - PowerOff() then PowerCut(): the machine loses power. See the model below.
//
// # What PowerCut models, exactly
//
// The filesystem tracks, from Mount on, what a disk would hold after a power loss:
//
//   - File data is durable at a successful fsync or fdatasync of that file (through any
//     handle). PowerCut puts every file back to its size and bytes as of its last successful
//     fsync; a file that existed at Mount and was not written since is left as it is.
//     Written ranges are tracked with an undo log (the old bytes under each write, truncate
//     or hole punch since the last fsync), so a preallocated file costs nothing extra.
//   - The name of a file created since Mount is durable once the file itself or the
//     directory it is in has been fsynced after the create (what ext4 and XFS do: an fsync
//     of a new file commits its directory entry in the same journal transaction). A file
//     whose name never became durable is removed by PowerCut, whatever its data.
//     StrictNames(true) takes POSIX's letter instead: only an fsync of the directory makes
//     a new name durable.
//   - Everything else that changes names is durable at once: mkdir, rmdir, rename, unlink,
//     link, symlink, as if the filesystem journalled each in order and committed at once.
//     This is the optimistic part: a rename that a power cut would undo on a filesystem
//     that delays metadata is not modelled. A renamed file keeps its data state (the undo
//     log follows the inode, not the name).
//   - Writes through a shared mmap reach the filesystem as writes when the kernel writes
//     the pages back (always before an fsync returns) and are tracked as writes. Reads
//     through mmap (bolt reads its file so) go through the kernel's page cache, as on any
//     FUSE mount without direct_io.
//   - A failed fsync (FailFsync) makes nothing durable; the data it did not sync is lost by
//     the next PowerCut unless a later fsync succeeds.
//
// PowerOff is the moment of the cut: from then on every write, fsync and name change fails
// with EIO and changes nothing, an fsync still sleeping its delay included. PowerCut needs
// every process that has files open on the mount gone (PowerOff, then SIGKILL them): it
// unmounts (a reboot drops the page cache), puts the backing directory back as above, and
// mounts again at the same place. An unmount that a copy of the mount in another mount
// namespace keeps from ending (ip netns exec copies every mount) is ended after 2 s by
// aborting the FUSE connection (fusectl, mounted at /sys/fs/fuse/connections if need be).
//
// # Where it runs
//
// It needs /dev/fuse, the fusermount (or fusermount3) helper and root (the tests mount
// with mount(2) directly when they can); Mount skips the test saying what is missing,
// except under CI=true, where it fails (.ci/run installs fuse3). Only _test.go files may
// import it (cluster/clustertest's layering test lists it as test-only).
package faultfs
