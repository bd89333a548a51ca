package server

import "syscall"

// errTooManyFiles is accept's EMFILE: out of file descriptors, worth a retry after a pause.
var errTooManyFiles error = syscall.EMFILE
