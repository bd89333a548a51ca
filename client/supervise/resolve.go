package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"syscall"
)

// ResolveError says why a command cannot be run. NotFound tells "no such command" (the
// shell's 127) from "found but not executable" (126).
type ResolveError struct {
	Name     string
	NotFound bool
	Err      error
}

func (e *ResolveError) Error() string {
	if e.NotFound {
		return fmt.Sprintf("command %q not found: %v", e.Name, e.Err)
	}
	return fmt.Sprintf("command %q cannot be executed: %v", e.Name, e.Err)
}

func (e *ResolveError) Unwrap() error { return e.Err }

// Resolve finds name as exec.LookPath does (in PATH unless it holds a slash; a regular file
// with an execute bit that this user may use) and returns its path. It is called before the
// lock is taken, so that a missing or non-executable command takes no grant.
func Resolve(name string) (string, error) {
	if name == "" {
		return "", &ResolveError{Name: name, NotFound: true, Err: errors.New("empty command name")}
	}
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	var notFound bool
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, exec.ErrDot):
		notFound = true
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EISDIR):
	default:
		notFound = true
	}
	return "", &ResolveError{Name: name, NotFound: notFound, Err: unwrapExec(err)}
}

// unwrapExec drops exec.Error's own "exec: name:" prefix; ResolveError names the command.
func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
