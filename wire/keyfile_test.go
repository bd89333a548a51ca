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
