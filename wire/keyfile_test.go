package wire

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadKeyFile refuses a file its group or others may write, naming the fix, reports one
// everyone may read as exposed, and reads a private one.
func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		perm    os.FileMode
		refused bool
		exposed bool
	}{
		{0o600, false, false}, {0o400, false, false}, {0o640, false, true}, {0o644, false, true},
		{0o620, true, false}, {0o602, true, false}, {0o666, true, false},
	} {
		path := filepath.Join(dir, c.perm.String())
		if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.perm); err != nil {
			t.Fatal(err)
		}
		data, exposed, err := ReadKeyFile(path)
		switch {
		case c.refused && (!errors.Is(err, ErrKeyFileWritable) || !strings.Contains(err.Error(), "chmod 600 "+path)):
			t.Errorf("mode %04o: %v, want ErrKeyFileWritable naming chmod 600", c.perm, err)
		case !c.refused && (err != nil || string(data) != "secret" || exposed != c.exposed):
			t.Errorf("mode %04o: %q exposed=%v %v, want the bytes, exposed=%v", c.perm, data, exposed, err, c.exposed)
		}
	}
	if _, _, err := ReadKeyFile(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// As root, ReadKeyFile refuses a file another user owns, and a file in a directory others
// may write without the sticky bit, or that another user owns; it reads one in a sticky
// directory (as /tmp) and one reached through a symbolic link from a safe place.
func TestReadKeyFilePlace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the owner rules are those of a root process (chown); run the tests as root, as CI does")
	}
	base := t.TempDir()
	mk := func(dir string, mode os.FileMode) string {
		d := filepath.Join(base, dir)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	file := func(dir string) string {
		f := filepath.Join(dir, "secret")
		if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	safe := file(mk("safe", 0o700))
	if _, _, err := ReadKeyFile(safe); err != nil {
		t.Fatalf("a root file in a root directory: %v", err)
	}
	if _, _, err := ReadKeyFile(file(mk("sticky", 0o777|os.ModeSticky))); err != nil {
		t.Fatalf("a root file in a sticky directory: %v", err)
	}
	if _, _, err := ReadKeyFile(file(mk("open", 0o777))); !errors.Is(err, ErrKeyFileWritable) || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("a file in a directory anyone may write: %v, want ErrKeyFileWritable naming the fix", err)
	}
	theirs := file(mk("theirs", 0o700))
	if err := os.Chown(theirs, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadKeyFile(theirs); !errors.Is(err, ErrKeyFileOwner) || !strings.Contains(err.Error(), "chown root") {
		t.Fatalf("a 0600 file of uid 4321: %v, want ErrKeyFileOwner naming the fix", err)
	}
	theirDir := mk("theirdir", 0o755)
	inTheirs := file(theirDir)
	if err := os.Chown(theirDir, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadKeyFile(inTheirs); !errors.Is(err, ErrKeyFileOwner) {
		t.Fatalf("a root file in a directory of uid 4321: %v, want ErrKeyFileOwner", err)
	}
	link := filepath.Join(mk("links", 0o777|os.ModeSticky), "secret")
	if err := os.Symlink(inTheirs, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadKeyFile(link); !errors.Is(err, ErrKeyFileOwner) {
		t.Fatalf("a link into a directory of uid 4321: %v, want ErrKeyFileOwner (where it leads counts)", err)
	}
	good := filepath.Join(base, "links", "good")
	if err := os.Symlink(safe, good); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadKeyFile(good); err != nil {
		t.Fatalf("a link in a sticky directory to a safe file: %v", err)
	}
}
