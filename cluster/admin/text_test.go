package admin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latchd/latch/cluster/raftnode"
)

// The admin verbs' tables: status with its peers sorted, members, locks, one lock's line.
func TestText(t *testing.T) {
	var st map[string]json.RawMessage
	raw := `{"mode":"cluster","build":{"version":"v1.2.3","revision":"abc","date":"2026-12-01T10:00:00Z","go":"go1.26.0"},"node":{"last_token":7,"keys":2,"waiters":1},
		"raft":{"id":"n1","state":"Leader","leader_id":"n1","leader_addr":"a:1","term":3,"commit_index":9,"applied_index":9,"last_contact":"0001-01-01T00:00:00Z",
		"peers":[{"id":"n2","addr":"b:1","suffrage":"Voter"},{"id":"n1","addr":"a:1","suffrage":"Voter"}]}}`
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := squeeze(b.String())
	for _, want := range []string{"mode cluster\n", "version v1.2.3 (revision abc, built 2026-12-01T10:00:00Z, go1.26.0)\n", "leader n1 (a:1)\n", "last contact - (this node leads)\n", "last token 7\n", "waiters 1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "peer n1") > strings.Index(out, "peer n2") {
		t.Errorf("peers not sorted by id:\n%s", out)
	}

	for contact, want := range map[string]string{`"0001-01-01T00:00:00Z"`: "never", `"2026-12-04T10:00:00.5Z"`: "2026-12-04T10:00:00.5Z"} {
		st["raft"] = json.RawMessage(`{"id":"n2","state":"Follower","last_contact":` + contact + `}`)
		b.Reset()
		if err := WriteStatus(&b, st); err != nil {
			t.Fatal(err)
		}
		if out := squeeze(b.String()); !strings.Contains(out, "last contact "+want+"\n") {
			t.Errorf("a follower's last contact %s: want %q in\n%s", contact, want, out)
		}
	}

	b.Reset()
	WriteMembers(&b, []Member{{ID: "n1", Addr: "a:1", Suffrage: "Voter"}})
	if b.String() != "ID  ADDR  SUFFRAGE\nn1  a:1   Voter\n" {
		t.Errorf("members:\n%q", b.String())
	}

	b.Reset()
	table := NewLockTable(&b, false)
	table.Add(Lock{Key: "k", Held: true, Token: 5, LeaseLeft: 1.23456, Releasing: true, Waiters: 2})
	table.Flush()
	if want := "KEY TOKEN LEASE LEFT WAITERS\nk 5 1.234s (releasing) 2\n"; squeeze(b.String()) != want {
		t.Errorf("locks:\n%q, want\n%q", b.String(), want)
	}
	b.Reset()
	table = NewLockTable(&b, true)
	table.Add(Lock{Key: "k", Waiters: 1})
	table.Flush()
	if b.String() != `{"key":"k","held":false,"waiters":1}`+"\n" {
		t.Errorf("locks as JSON: %q", b.String())
	}
	if got := (Lock{Key: "k", Waiters: 3}).String(); got != "k free (waiters 3)" {
		t.Errorf("a free lock: %q", got)
	}
	if got := (Lock{Key: "k", Held: true, Token: 5, LeaseLeft: 2, Waiters: 0}).String(); got != "k held token 5 lease left 2s waiters 0" {
		t.Errorf("a held lock: %q", got)
	}
}

// WriteBackup leaves the whole backup at its name and no temporary file; a directory that
// cannot be written leaves nothing.
func TestWriteBackup(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	if err := WriteBackup(file, []byte("backup")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "backup" {
		t.Fatalf("read back %q, %v", data, err)
	}
	if _, err := os.Stat(file + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary file is left: %v", err)
	}
	if err := WriteBackup(filepath.Join(dir, "missing", "b.snap"), []byte("x")); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

// squeeze is text with each line's runs of blanks made one space: the table's content
// without its column widths.
func squeeze(text string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if line != "" {
			b.WriteString(strings.Join(strings.Fields(line), " ") + "\n")
		}
	}
	return b.String()
}

// latch recover's line: the log's end, the state, the members, then each damage.
func TestWriteDiskState(t *testing.T) {
	var b strings.Builder
	ds := raftnode.DiskState{LastIndex: 9, LastTerm: 2, Servers: []raftnode.Server{{ID: "n1", Addr: "a:1", Suffrage: "Voter"}}, Damage: []string{"older than promised"}}
	ds.State.LastToken, ds.State.Keys = 7, 3
	WriteDiskState(&b, "before", ds)
	if want := "before: last index 9 (term 2), last token 7, 3 held keys, members: n1=a:1(Voter)\ndamage: older than promised\n"; b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}
