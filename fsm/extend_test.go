package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func extend(key string, tok Token, lease uint16) Command {
	return Command{Kind: CmdExtend, Key: []byte(key), Token: tok, Lease: lease}
}

// expN is an Expire made for a holder extended n times.
func expN(key string, tok Token, n uint32) Command {
	return Command{Kind: CmdExpire, Key: []byte(key), Token: tok, Extensions: n}
}

// TestBatchV2Layout pins the bytes of format version 2.
func TestBatchV2Layout(t *testing.T) {
	cmds := []Command{
		{Kind: CmdAcquire, Key: []byte("k"), Lease: 30},
		{Kind: CmdRelease, Key: []byte("k"), Token: 0x0102030405060708},
		{Kind: CmdExpire, Key: []byte("ab"), Token: 1},
		{Kind: CmdExpire, Key: []byte("ab"), Token: 2, Extensions: 0x0a0b0c0d},
		{Kind: CmdExtend, Key: []byte("k"), Token: 3, Lease: 0x0e10},
		{Kind: CmdFloor, Token: MaxToken},
	}
	b, err := AppendBatch(nil, cmds)
	if err != nil {
		t.Fatal(err)
	}
	const want = "02" + "00000006" +
		"01" + "01" + "6b" + "001e" +
		"02" + "01" + "6b" + "0102030405060708" +
		"03" + "02" + "6162" + "0000000000000001" + "00000000" +
		"03" + "02" + "6162" + "0000000000000002" + "0a0b0c0d" +
		"05" + "01" + "6b" + "0000000000000003" + "0e10" +
		"04" + "7fffffffffffffff"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
}

// TestBatchVersionRule: version 1 whenever it carries every command, so a
// cluster that never extends writes what it always wrote; version 2 only for
// an Extend or an Expire for a count other than 0, wherever it is in the
// batch.
func TestBatchVersionRule(t *testing.T) {
	many := make([]Command, 0, 300)
	for i := range 299 {
		many = append(many, Command{Kind: CmdAcquire, Key: appendKey(nil, i), Lease: 30})
	}
	for _, tc := range []struct {
		name string
		cmds []Command
		want byte
	}{
		{"empty", nil, 1},
		{"acquire, release, floor", []Command{acq("a", 1), rel("a", 1), flr(3)}, 1},
		{"expire for count 0", []Command{exp("a", 1), expN("b", 2, 0)}, 1},
		{"unused counts are not encoded", []Command{
			{Kind: CmdAcquire, Key: []byte("a"), Lease: 1, Extensions: 9},
			{Kind: CmdRelease, Key: []byte("a"), Token: 1, Extensions: 9},
			{Kind: CmdFloor, Token: 1, Extensions: 9},
		}, 1},
		{"expire for count 1", []Command{expN("a", 1, 1)}, 2},
		{"extend", []Command{extend("a", 1, 30)}, 2},
		{"invalid extend (lease 0)", []Command{extend("a", 1, 0)}, 2},
		{"v2 command first", []Command{extend("a", 1, 30), acq("b", 1)}, 2},
		{"v2 command last of 300", append(many[:299:299], expN("x", 1, MaxExtensions)), 2},
		{"299 acquires", many[:299], 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := AppendBatch(bytes.Clone(prefix), tc.cmds)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatalf("AppendBatch clobbered its prefix: %x", b[:len(prefix)])
			}
			if got := b[len(prefix)]; got != tc.want {
				t.Fatalf("version %d, want %d", got, tc.want)
			}
			highest := byte(batchV1)
			for _, c := range tc.cmds {
				highest = max(highest, c.MinBatchVersion())
			}
			if highest != tc.want {
				t.Fatalf("highest MinBatchVersion %d, batch version %d", highest, tc.want)
			}
			got, err := DecodeBatch(b[len(prefix):], nil)
			if err != nil || len(got) != len(tc.cmds) {
				t.Fatalf("DecodeBatch: %d commands, %v", len(got), err)
			}
			for i := range got {
				if want := canonical(tc.cmds[i]); !sameCommand(got[i], want) {
					t.Fatalf("command %d = %+v, want %+v", i, got[i], want)
				}
			}
		})
	}
}

func TestBatchV2RoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmds []Command
	}{
		{"extend", []Command{extend("k", 7, 30)}},
		{"extend 128-byte key, lease 3600, MaxToken", []Command{extend(string(key128), MaxToken, MaxLease)}},
		{"extend 255-byte key, lease 65535, token 2^64-1", []Command{{Kind: CmdExtend, Key: key255, Token: 1<<64 - 1, Lease: 65535}}},
		{"extend empty key, lease 0, token 0", []Command{{Kind: CmdExtend, Key: []byte{}}}},
		{"expire for MaxExtensions", []Command{expN("k", 1, MaxExtensions)}},
		{"expire for count 0 next to one for count 1", []Command{expN("a", 1, 0), expN("b", 2, 1)}},
		{"unused fields are dropped", []Command{
			{Kind: CmdExtend, Key: []byte("a"), Lease: 5, Token: 1, Extensions: 7},
			{Kind: CmdAcquire, Key: []byte("a"), Lease: 5, Token: 99, Extensions: 7},
			{Kind: CmdRelease, Key: []byte("a"), Lease: 5, Token: 1, Extensions: 7},
			{Kind: CmdExpire, Key: []byte("a"), Lease: 5, Token: 1, Extensions: 7},
			{Kind: CmdFloor, Key: []byte("x"), Lease: 5, Token: 3, Extensions: 7},
		}},
		{"extend, late expire, expiry and grant in one batch", []Command{
			extend("q", 41, 60), expN("q", 41, 0), expN("r", 40, 3), acq("r", 1),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := AppendBatch(nil, tc.cmds)
			if err != nil {
				t.Fatal(err)
			}
			if data[0] != batchV2 {
				t.Fatalf("version %d, want 2", data[0])
			}
			orig := bytes.Clone(data)
			got, err := DecodeBatch(data, nil)
			if err != nil {
				t.Fatalf("DecodeBatch(%x): %v", data, err)
			}
			if len(got) != len(tc.cmds) {
				t.Fatalf("decoded %d commands, want %d", len(got), len(tc.cmds))
			}
			for i := range got {
				if want := canonical(tc.cmds[i]); !sameCommand(got[i], want) {
					t.Errorf("command %d = %+v, want %+v", i, got[i], want)
				}
			}
			if again, err := AppendBatch(nil, got); err != nil || !bytes.Equal(again, data) {
				t.Fatalf("re-encode = %x, %v; want %x", again, err, data)
			}
			if !bytes.Equal(data, orig) {
				t.Fatal("DecodeBatch modified its input")
			}
		})
	}
}

func TestDecodeBatchV2Rejects(t *testing.T) {
	valid, _ := AppendBatch(nil, []Command{extend("k", 1, 30), expN("k", 1, 1), acq("a", 1)})
	mk := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty version 2 batch", mk("0200000000")},
		{"only expires for count 0", mk("0200000001" + "03016b" + "0000000000000001" + "00000000")},
		{"only version 1 kinds", mk("0200000001" + "01016b001e")},
		{"extend without keylen", mk("020000000105")},
		{"extend key truncated", mk("02000000010503" + "6162")},
		{"extend lease truncated", mk("0200000001" + "05016b" + "0000000000000001" + "00")},
		{"extend token truncated", mk("0200000001" + "05016b" + "00000000000000")},
		{"expire count truncated", mk("0200000001" + "03016b" + "0000000000000001" + "000001")},
		{"expire without its count (a version 1 body)", mk("0200000002" + "03016b" + "0000000000000001" + "05016b" + "0000000000000001" + "001e")},
		{"unknown kind 7", mk("0200000002" + "05016b" + "0000000000000001" + "001e" + "07016b001e")},
		{"trailing bytes", append(bytes.Clone(valid), 0)},
		{"count too high", append(mk("0200000004"), valid[batchHeaderLen:]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []Command{flr(9)}
			got, err := DecodeBatch(tc.data, dst)
			if !errors.Is(err, ErrBatchMalformed) {
				t.Fatalf("DecodeBatch(%x) err = %v, want ErrBatchMalformed", tc.data, err)
			}
			if len(got) != 1 || got[0].Token != 9 {
				t.Fatalf("failed decode changed dst: %+v", got)
			}
			for i, c := range got[1:cap(got)] {
				if c.Key != nil || c.Kind != 0 {
					t.Fatalf("failed decode left command %d in dst's spare capacity: %+v", i+1, c)
				}
			}
		})
	}
	for n := range len(valid) {
		if _, err := DecodeBatch(valid[:n], nil); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
}

func TestBatchV2DoesNotAllocate(t *testing.T) {
	cmds := make([]Command, 0, 256)
	for i := range 128 {
		k := appendKey(nil, i)
		cmds = append(cmds, extend(string(k), Token(i+1), 30), expN(string(k), Token(i+1), uint32(i)))
	}
	data, err := AppendBatch(nil, cmds)
	if err != nil || data[0] != batchV2 {
		t.Fatalf("AppendBatch: version %d, %v", data[0], err)
	}
	dst := make([]Command, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeBatch(data, dst[:0]); err != nil {
			panic(err)
		}
	}); n != 0 {
		t.Errorf("DecodeBatch: %v allocs per run, want 0", n)
	}
	buf := make([]byte, 0, len(data))
	if n := testing.AllocsPerRun(100, func() {
		if _, err := AppendBatch(buf[:0], cmds); err != nil {
			panic(err)
		}
	}); n != 0 {
		t.Errorf("AppendBatch into a big enough buffer: %v allocs per run, want 0", n)
	}
}

// TestAppendBatchRejectsAfterExtend: an unencodable command after the one
// that makes the batch version 2 still fails the whole batch.
func TestAppendBatchRejectsAfterExtend(t *testing.T) {
	in := []byte("keep")
	out, err := AppendBatch(in, []Command{extend("a", 1, 1), {Kind: CmdRelease, Key: make([]byte, 256)}})
	if !errors.Is(err, ErrUnencodable) || string(out) != "keep" {
		t.Fatalf("AppendBatch = %q, %v; want the input unchanged and ErrUnencodable", out, err)
	}
}
