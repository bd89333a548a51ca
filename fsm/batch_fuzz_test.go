package fsm

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeBatch feeds arbitrary entries to the decoder and the table: it
// must never panic, a rejected entry must leave dst alone, and an accepted
// one must re-encode to exactly the same bytes (one encoding per batch).
func FuzzDecodeBatch(f *testing.F) {
	seeds := [][]Command{
		nil,
		{acq("k", 30)},
		{acq(string(key128), MaxLease), rel(string(key128), MaxToken), exp("e", 1), flr(MaxToken)},
		{rel("q", 41), acq("q", 60), exp("r", 40), acq("r", 1)},
		{acq("", 0), Command{Kind: CmdAcquire, Key: key255, Lease: 65535}, flr(1<<64 - 1)},
		{flr(1000), acq("a", 1), acq("a", 1), rel("a", 1001), rel("a", 1001)},
		{acq("k", 1), extend("k", 1, 30), expN("k", 1, 0), expN("k", 1, 1), extend("k", 1, 0)},
		{expN(string(key128), MaxToken, MaxExtensions), {Kind: CmdExtend, Key: key255, Token: 1<<64 - 1, Lease: 65535}},
		{enable(FeatureLeases)},
		{acq("k", 1), enable(0), extend("k", 1, 30), enable(FeatureLeases), flr(3)},
	}
	for _, s := range seeds {
		b, err := AppendBatch(nil, s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 1, 5, 1, 'k', 0, 0, 0, 0, 0, 0, 0, 1, 0, 1})       // an extend in version 1
	f.Add([]byte{2, 0, 0, 0, 1, 3, 1, 'k', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}) // version 2, count 0 only
	f.Add([]byte{1, 0, 0, 0, 1, 9})
	f.Add([]byte{1, 0, 0, 0, 1, 6, 0, 0, 0, 1})    // an enable in version 1
	f.Add([]byte{2, 0, 0, 0, 1, 6, 0, 0, 0, 2})    // an enable of a bit this latch does not know
	f.Add([]byte{2, 0, 0, 0, 1, 6, 0xff, 0, 0, 1}) // and of several
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 1})

	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		sentinel := Command{Kind: CmdFloor, Token: 42}
		cmds, err := DecodeBatch(data, []Command{sentinel})
		if len(cmds) == 0 || !sameCommand(cmds[0], sentinel) {
			t.Fatalf("dst's existing command was changed: %+v", cmds)
		}
		if !bytes.Equal(data, orig) {
			t.Fatal("DecodeBatch modified its input")
		}
		if err != nil {
			if len(cmds) != 1 {
				t.Fatalf("error %v but %d commands returned", err, len(cmds))
			}
			if !errors.Is(err, ErrBatchMalformed) && !errors.Is(err, ErrBatchVersion) {
				t.Fatalf("error %v wraps neither ErrBatchMalformed nor ErrBatchVersion", err)
			}
			return
		}
		again, err := AppendBatch(nil, cmds[1:])
		if err != nil {
			t.Fatalf("decoded batch does not re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", again, data)
		}
		tb := newTable(t, 0)
		for _, c := range cmds[1:] {
			r := tb.ApplyCommand(c)
			if (r.Kind == Invalid) != (c.Validate() != nil) {
				t.Fatalf("ApplyCommand(%+v) = %v but Validate = %v", c, r.Kind, c.Validate())
			}
		}
	})
}
