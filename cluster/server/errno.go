package server

import (
	"errors"
	"os"
	"syscall"
)

// outOfDescriptors reports whether an accept failed because the process (EMFILE) or the
// system (ENFILE) has no file descriptor left: worth a retry after a pause, and a refusal
// on the spare descriptor meanwhile.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// spare is one descriptor held open (on /dev/null) so that, when the process runs out of
// them, the accept loop can let it go, accept the connection the kernel is holding, answer
// it E unavailable and close it, instead of leaving every client in the listen backlog
// until it gives up. Not safe for concurrent use: the accept loop owns it.
type spare struct{ f *os.File }

// open takes the spare descriptor if it is not held; it reports whether it is.
func (s *spare) open() bool {
	if s.f == nil {
		s.f, _ = os.Open(os.DevNull)
	}
	return s.f != nil
}

// release gives the spare descriptor back to the process, if held.
func (s *spare) release() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
