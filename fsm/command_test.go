package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

var (
	key128 = []byte(strings.Repeat("k", MaxKeyLen))
	key255 = []byte(strings.Repeat("x", 255))
)

func sameCommand(a, b Command) bool {
	return a.Kind == b.Kind && bytes.Equal(a.Key, b.Key) && a.Lease == b.Lease && a.Token == b.Token &&
		a.Extensions == b.Extensions && a.Features == b.Features
}

// canonical drops the fields a kind does not encode, as a round trip does.
func canonical(c Command) Command {
	if c.Kind != CmdEnable {
		c.Features = 0
	}
	switch c.Kind {
	case CmdAcquire:
		c.Token, c.Extensions = 0, 0
	case CmdRelease:
		c.Lease, c.Extensions = 0, 0
	case CmdExpire:
		c.Lease = 0
	case CmdExtend:
		c.Extensions = 0
	case CmdFloor:
		c.Key, c.Lease, c.Extensions = nil, 0, 0
	case CmdEnable:
		c.Key, c.Lease, c.Extensions, c.Token = nil, 0, 0, 0
	}
	return c
}

func TestBatchRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		cmds []Command
	}{
		{"empty batch", nil},
		{"acquire", []Command{{Kind: CmdAcquire, Key: []byte("k"), Lease: 30}}},
		{"acquire lease 3600, 128-byte key", []Command{{Kind: CmdAcquire, Key: key128, Lease: MaxLease}}},
		{"acquire lease 0 (invalid, encodable)", []Command{{Kind: CmdAcquire, Key: []byte("k"), Lease: 0}}},
		{"acquire lease 65535", []Command{{Kind: CmdAcquire, Key: []byte("k"), Lease: 65535}}},
		{"acquire empty key", []Command{{Kind: CmdAcquire, Key: []byte{}, Lease: 1}}},
		{"acquire 255-byte key", []Command{{Kind: CmdAcquire, Key: key255, Lease: 1}}},
		{"release", []Command{{Kind: CmdRelease, Key: []byte("lock/1"), Token: 7}}},
		{"release MaxToken", []Command{{Kind: CmdRelease, Key: key128, Token: MaxToken}}},
		{"release token 0", []Command{{Kind: CmdRelease, Key: []byte("a"), Token: 0}}},
		{"release token 2^64-1", []Command{{Kind: CmdRelease, Key: []byte("a"), Token: 1<<64 - 1}}},
		{"expire", []Command{{Kind: CmdExpire, Key: []byte("lock/1"), Token: 8}}},
		{"expire MaxToken", []Command{{Kind: CmdExpire, Key: key128, Token: MaxToken}}},
		{"floor 0", []Command{{Kind: CmdFloor, Token: 0}}},
		{"floor MaxToken", []Command{{Kind: CmdFloor, Token: MaxToken}}},
		{"floor 2^64-1 (invalid, encodable)", []Command{{Kind: CmdFloor, Token: 1<<64 - 1}}},
		{"unused fields are dropped", []Command{
			{Kind: CmdAcquire, Key: []byte("a"), Lease: 5, Token: 99, Extensions: 7},
			{Kind: CmdRelease, Key: []byte("a"), Lease: 5, Token: 1, Extensions: 7},
			{Kind: CmdExpire, Key: []byte("a"), Lease: 5, Token: 1},
			{Kind: CmdFloor, Key: []byte("ignored"), Lease: 5, Token: 3, Extensions: 7},
		}},
		{"release then grant to the next waiter", []Command{
			{Kind: CmdRelease, Key: []byte("q"), Token: 41},
			{Kind: CmdAcquire, Key: []byte("q"), Lease: 60},
			{Kind: CmdExpire, Key: []byte("r"), Token: 40},
			{Kind: CmdAcquire, Key: []byte("r"), Lease: 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := AppendBatch(bytes.Clone(prefix), tc.cmds)
			if err != nil {
				t.Fatalf("AppendBatch: %v", err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatalf("AppendBatch clobbered its prefix: %x", b)
			}
			data := b[len(prefix):]
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
			again, err := AppendBatch(nil, got)
			if err != nil || !bytes.Equal(again, data) {
				t.Fatalf("re-encode = %x, %v; want %x", again, err, data)
			}
			if !bytes.Equal(data, orig) {
				t.Fatal("DecodeBatch modified its input")
			}
		})
	}
}

// TestBatchLayout pins the bytes of format version 1: changing them breaks
// every stored log.
func TestBatchLayout(t *testing.T) {
	cmds := []Command{
		{Kind: CmdAcquire, Key: []byte("k"), Lease: 30},
		{Kind: CmdRelease, Key: []byte("k"), Token: 0x0102030405060708},
		{Kind: CmdExpire, Key: []byte("ab"), Token: 1},
		{Kind: CmdFloor, Token: MaxToken},
	}
	b, err := AppendBatch(nil, cmds)
	if err != nil {
		t.Fatal(err)
	}
	const want = "01" + "00000004" +
		"01" + "01" + "6b" + "001e" +
		"02" + "01" + "6b" + "0102030405060708" +
		"03" + "02" + "6162" + "0000000000000001" +
		"04" + "7fffffffffffffff"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
}

func TestAppendBatchRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Command
	}{
		{"kind 0", Command{Kind: 0, Key: []byte("k")}},
		{"kind 7", Command{Kind: 7, Key: []byte("k")}},
		{"enable of an unknown bit", Command{Kind: CmdEnable, Features: 1 << 31}},
		{"enable of a known and an unknown bit", Command{Kind: CmdEnable, Features: FeatureLeases | 1<<1}},
		{"256-byte acquire key", Command{Kind: CmdAcquire, Key: make([]byte, 256), Lease: 1}},
		{"256-byte release key", Command{Kind: CmdRelease, Key: make([]byte, 256), Token: 1}},
		{"256-byte expire key", Command{Kind: CmdExpire, Key: make([]byte, 256), Token: 1}},
		{"256-byte expire key with a count", Command{Kind: CmdExpire, Key: make([]byte, 256), Token: 1, Extensions: 1}},
		{"256-byte extend key", Command{Kind: CmdExtend, Key: make([]byte, 256), Token: 1, Lease: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte("keep")
			ok := Command{Kind: CmdAcquire, Key: []byte("fine"), Lease: 1}
			out, err := AppendBatch(in, []Command{ok, tc.c})
			if !errors.Is(err, ErrUnencodable) {
				t.Fatalf("err = %v, want ErrUnencodable", err)
			}
			if string(out) != "keep" {
				t.Fatalf("returned %q, want the input unchanged", out)
			}
			if tc.c.Validate() == nil {
				t.Fatal("Validate accepted a command AppendBatch cannot encode")
			}
		})
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	valid, _ := AppendBatch(nil, []Command{
		{Kind: CmdAcquire, Key: []byte("k"), Lease: 30},
		{Kind: CmdRelease, Key: []byte("k"), Token: 1},
	})
	mk := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"nil", nil, ErrBatchMalformed},
		{"empty", []byte{}, ErrBatchMalformed},
		{"version 0", mk("0000000000"), ErrBatchMalformed},
		{"version 2 without an extend", mk("0200000000"), ErrBatchMalformed},
		{"version 3", mk("0300000000"), ErrBatchVersion},
		{"version 255 alone", mk("ff"), ErrBatchVersion},
		{"short header", mk("01000000"), ErrBatchMalformed},
		{"count beyond data", mk("01ffffffff01016b001e"), ErrBatchMalformed},
		{"count 1, no command", mk("01000000010000"), ErrBatchMalformed},
		{"unknown kind 0", mk("010000000100000000"), ErrBatchMalformed},
		{"unknown kind 7", mk("010000000107016b001e"), ErrBatchMalformed},
		{"enable in version 1", mk("010000000106" + "00000001"), ErrBatchMalformed},
		{"extend in version 1", mk("010000000105016b" + "0000000000000001" + "001e"), ErrBatchMalformed},
		{"acquire without keylen", mk("010000000101"), ErrBatchMalformed},
		{"acquire key truncated", mk("01000000010105616263"), ErrBatchMalformed},
		{"acquire lease truncated", mk("0100000001010161" + "00"), ErrBatchMalformed},
		{"release token truncated", mk("01000000010201610000000000000001"[:30]), ErrBatchMalformed},
		{"floor truncated", mk("010000000104" + "00000000000000"), ErrBatchMalformed},
		{"trailing bytes", append(bytes.Clone(valid), 0), ErrBatchMalformed},
		{"count too low", append(mk("0100000001"), valid[batchHeaderLen:]...), ErrBatchMalformed},
		{"count too high", append(mk("0100000003"), valid[batchHeaderLen:]...), ErrBatchMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := []Command{{Kind: CmdFloor, Token: 9}}
			got, err := DecodeBatch(tc.data, dst)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeBatch(%x) err = %v, want %v", tc.data, err, tc.want)
			}
			if len(got) != 1 || got[0].Token != 9 {
				t.Fatalf("failed decode changed dst: %+v", got)
			}
			if full := got[:cap(got)]; len(full) > 1 {
				for i, c := range full[1:] {
					if c.Key != nil || c.Kind != 0 {
						t.Fatalf("failed decode left command %d in dst's spare capacity: %+v", i+1, c)
					}
				}
			}
		})
	}
	// Every proper prefix of a valid batch is rejected.
	for n := range len(valid) {
		if _, err := DecodeBatch(valid[:n], nil); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
}

func TestDecodeBatchAppendsAndAliases(t *testing.T) {
	data, _ := AppendBatch(nil, []Command{{Kind: CmdAcquire, Key: []byte("abc"), Lease: 3}})
	dst := make([]Command, 1, 4)
	dst[0] = Command{Kind: CmdFloor, Token: 1}
	got, err := DecodeBatch(data, dst)
	if err != nil || len(got) != 2 || got[0].Token != 1 || string(got[1].Key) != "abc" {
		t.Fatalf("DecodeBatch = %+v, %v", got, err)
	}
	if &got[1].Key[0] != &data[7] {
		t.Fatal("key was copied, want it to alias the entry")
	}
	if cap(got[1].Key) != 3 {
		t.Fatalf("key capacity %d reaches past the key into the entry", cap(got[1].Key))
	}
}

func TestDecodeBatchDoesNotAllocate(t *testing.T) {
	cmds := make([]Command, 0, 256)
	for i := range 128 {
		k := appendKey(nil, i)
		cmds = append(cmds, Command{Kind: CmdAcquire, Key: k, Lease: 30}, Command{Kind: CmdRelease, Key: k, Token: Token(i + 1)})
	}
	data, err := AppendBatch(nil, cmds)
	if err != nil {
		t.Fatal(err)
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

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c  Command
		ok bool
	}{
		{Command{Kind: CmdAcquire, Key: []byte("k"), Lease: 1}, true},
		{Command{Kind: CmdAcquire, Key: key128, Lease: MaxLease}, true},
		{Command{Kind: CmdAcquire, Key: []byte("k"), Lease: 0}, false},
		{Command{Kind: CmdAcquire, Key: []byte("k"), Lease: MaxLease + 1}, false},
		{Command{Kind: CmdAcquire, Key: nil, Lease: 1}, false},
		{Command{Kind: CmdAcquire, Key: []byte{}, Lease: 1}, false},
		{Command{Kind: CmdAcquire, Key: append(key128, 'x'), Lease: 1}, false},
		{Command{Kind: CmdRelease, Key: []byte("k"), Token: 0}, true},
		{Command{Kind: CmdRelease, Key: []byte("k"), Token: 1<<64 - 1}, true},
		{Command{Kind: CmdRelease, Key: nil, Token: 1}, false},
		{Command{Kind: CmdRelease, Key: key255, Token: 1}, false},
		{Command{Kind: CmdExpire, Key: key128, Token: MaxToken}, true},
		{Command{Kind: CmdExpire, Key: []byte{}, Token: 1}, false},
		{Command{Kind: CmdFloor, Token: 0}, true},
		{Command{Kind: CmdFloor, Token: MaxToken}, true},
		{Command{Kind: CmdFloor, Token: MaxToken + 1}, false},
		{Command{Kind: 0}, false},
		{Command{Kind: 7, Key: []byte("k"), Lease: 1}, false},
		{Command{Kind: CmdExpire, Key: []byte("k"), Token: 1, Extensions: MaxExtensions}, true},
		{Command{Kind: CmdExtend, Key: []byte("k"), Token: 1, Lease: 1}, true},
		{Command{Kind: CmdExtend, Key: key128, Token: 0, Lease: MaxLease}, true},
		{Command{Kind: CmdExtend, Key: []byte("k"), Token: 1, Lease: 0}, false},
		{Command{Kind: CmdExtend, Key: []byte("k"), Token: 1, Lease: MaxLease + 1}, false},
		{Command{Kind: CmdExtend, Key: nil, Token: 1, Lease: 1}, false},
		{Command{Kind: CmdExtend, Key: append(key128, 'x'), Token: 1, Lease: 1}, false},
	} {
		err := tc.c.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidCommand)) {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.c, err, tc.ok)
		}
	}
}

func TestKindStrings(t *testing.T) {
	for k, want := range map[CommandKind]string{CmdAcquire: "acquire", CmdRelease: "release", CmdExpire: "expire", CmdFloor: "floor", CmdExtend: "extend", 9: "CommandKind(9)"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", uint8(k), k.String(), want)
		}
	}
	seen := map[string]bool{}
	for k := Granted; k <= lastResultKind; k++ {
		s := k.String()
		if strings.HasPrefix(s, "ResultKind(") || seen[s] {
			t.Errorf("ResultKind %d has string %q", k, s)
		}
		seen[s] = true
	}
	if s := ResultKind(0).String(); s != "ResultKind(0)" {
		t.Errorf("ResultKind(0).String() = %q", s)
	}
}

func acq(key string, lease uint16) Command {
	return Command{Kind: CmdAcquire, Key: []byte(key), Lease: lease}
}
func rel(key string, tok Token) Command {
	return Command{Kind: CmdRelease, Key: []byte(key), Token: tok}
}
func exp(key string, tok Token) Command {
	return Command{Kind: CmdExpire, Key: []byte(key), Token: tok}
}
func flr(tok Token) Command { return Command{Kind: CmdFloor, Token: tok} }

// TestApplyCommandTransitions walks scripted sequences through ApplyCommand,
// checking each result and the state after each step.
func TestApplyCommandTransitions(t *testing.T) {
	type step struct {
		c    Command
		want Result
	}
	granted := func(key string, tok Token, lease uint16) Result {
		return Result{Kind: Granted, Token: tok, Holder: Holder{Token: tok, Lease: lease}, Key: key}
	}
	h := func(tok Token, lease uint16) Holder { return Holder{Token: tok, Lease: lease} }
	cases := []struct {
		name     string
		floor    Token
		steps    []step
		wantLast Token
		wantHeld map[string]Holder
	}{
		{
			name: "grant order is global and strictly increasing",
			steps: []step{
				{acq("a", 10), granted("a", 1, 10)},
				{acq("b", 20), granted("b", 2, 20)},
				{acq("a", 30), Result{Kind: Held, Holder: h(1, 10)}},
				{acq("c", 1), granted("c", 3, 1)},
				{rel("a", 1), Result{Kind: Released, Holder: h(1, 10)}},
				{acq("a", 5), granted("a", 4, 5)},
			},
			wantLast: 4,
			wantHeld: map[string]Holder{"a": h(4, 5), "b": h(2, 20), "c": h(3, 1)},
		},
		{
			name: "release needs the holder's token",
			steps: []step{
				{acq("k", 7), granted("k", 1, 7)},
				{rel("k", 0), Result{Kind: NotHeld, Holder: h(1, 7)}},
				{rel("k", 2), Result{Kind: NotHeld, Holder: h(1, 7)}},
				{rel("free", 1), Result{Kind: NotHeld}},
				{rel("k", 1), Result{Kind: Released, Holder: h(1, 7)}},
				{rel("k", 1), Result{Kind: NotHeld}},
			},
			wantLast: 1,
			wantHeld: map[string]Holder{},
		},
		{
			name: "a stale expire is a no-op",
			steps: []step{
				{acq("k", 1), granted("k", 1, 1)},
				{rel("k", 1), Result{Kind: Released, Holder: h(1, 1)}},
				{exp("k", 1), Result{Kind: Stale}},
				{acq("k", 2), granted("k", 2, 2)},
				{exp("k", 1), Result{Kind: Stale, Holder: h(2, 2)}},
				{exp("k", 0), Result{Kind: Stale, Holder: h(2, 2)}},
				{exp("k", 2), Result{Kind: Expired, Holder: h(2, 2)}},
				{exp("k", 2), Result{Kind: Stale}},
				{rel("k", 2), Result{Kind: NotHeld}},
			},
			wantLast: 2,
			wantHeld: map[string]Holder{},
		},
		{
			name: "release and grant to the next waiter in one batch",
			steps: []step{
				{acq("q", 60), granted("q", 1, 60)},
				{rel("q", 1), Result{Kind: Released, Holder: h(1, 60)}},
				{acq("q", 30), granted("q", 2, 30)},
				{exp("q", 2), Result{Kind: Expired, Holder: h(2, 30)}},
				{acq("q", 90), granted("q", 3, 90)},
			},
			wantLast: 3,
			wantHeld: map[string]Holder{"q": h(3, 90)},
		},
		{
			name:  "floor raises and never lowers",
			floor: 100,
			steps: []step{
				{flr(50), Result{Kind: Floored, Token: 100}},
				{flr(100), Result{Kind: Floored, Token: 100}},
				{acq("a", 1), granted("a", 101, 1)},
				{flr(1000), Result{Kind: Floored, Token: 1000}},
				{acq("b", 1), granted("b", 1001, 1)},
				{flr(0), Result{Kind: Floored, Token: 1001}},
				{flr(1001), Result{Kind: Floored, Token: 1001}},
				{acq("c", 1), granted("c", 1002, 1)},
				{rel("a", 101), Result{Kind: Released, Holder: h(101, 1)}},
			},
			wantLast: 1002,
			wantHeld: map[string]Holder{"b": h(1001, 1), "c": h(1002, 1)},
		},
		{
			name: "floor at MaxToken fails closed: every acquire is Exhausted, forever",
			steps: []step{
				{acq("a", 1), granted("a", 1, 1)},
				{flr(MaxToken), Result{Kind: Floored, Token: MaxToken}},
				{acq("b", 1), Result{Kind: Exhausted}},
				{acq("a", 1), Result{Kind: Exhausted}},
				{rel("a", 1), Result{Kind: Released, Holder: h(1, 1)}},
				{acq("a", 1), Result{Kind: Exhausted}},
				{flr(5), Result{Kind: Floored, Token: MaxToken}},
				{acq("a", 1), Result{Kind: Exhausted}},
			},
			wantLast: MaxToken,
			wantHeld: map[string]Holder{},
		},
		{
			name:  "issuing MaxToken exhausts the counter",
			floor: MaxToken - 2,
			steps: []step{
				{acq("a", 1), granted("a", MaxToken-1, 1)},
				{acq("b", 1), granted("b", MaxToken, 1)},
				{acq("c", 1), Result{Kind: Exhausted}},
				{exp("b", MaxToken), Result{Kind: Expired, Holder: h(MaxToken, 1)}},
				{acq("b", 1), Result{Kind: Exhausted}},
				{rel("a", MaxToken-1), Result{Kind: Released, Holder: h(MaxToken-1, 1)}},
				{acq("a", 1), Result{Kind: Exhausted}},
			},
			wantLast: MaxToken,
			wantHeld: map[string]Holder{},
		},
		{
			name: "invalid commands change nothing",
			steps: []step{
				{acq("a", 1), granted("a", 1, 1)},
				{acq("b", 0), Result{Kind: Invalid}},
				{acq("b", MaxLease+1), Result{Kind: Invalid}},
				{acq("", 1), Result{Kind: Invalid}},
				{acq(string(key128)+"x", 1), Result{Kind: Invalid}},
				{rel("", 1), Result{Kind: Invalid}},
				{exp(string(key255), 1), Result{Kind: Invalid}},
				{flr(MaxToken + 1), Result{Kind: Invalid}},
				{Command{Kind: 0}, Result{Kind: Invalid}},
				{Command{Kind: 77, Key: []byte("a"), Token: 1}, Result{Kind: Invalid}},
				{acq(string(key128), MaxLease), granted(string(key128), 2, MaxLease)},
			},
			wantLast: 2,
			wantHeld: map[string]Holder{"a": h(1, 1), string(key128): h(2, MaxLease)},
		},
		{
			name:  "invalid is checked before exhaustion",
			floor: MaxToken,
			steps: []step{
				{acq("a", 0), Result{Kind: Invalid}},
				{acq("a", 1), Result{Kind: Exhausted}},
			},
			wantLast: MaxToken,
			wantHeld: map[string]Holder{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, tc.floor)
			for i, s := range tc.steps {
				if got := tb.ApplyCommand(s.c); got != s.want {
					t.Fatalf("step %d %v(%q, lease %d, token %d) = %+v, want %+v",
						i, s.c.Kind, s.c.Key, s.c.Lease, s.c.Token, got, s.want)
				}
			}
			if got := snapshot(tb); !equalState(got, tc.wantHeld) || tb.LastToken() != tc.wantLast {
				t.Fatalf("state %v last %d, want %v last %d", got, tb.LastToken(), tc.wantHeld, tc.wantLast)
			}
		})
	}
}

func TestApplyCommandAllocations(t *testing.T) {
	tb := newTable(t, 0)
	tb.ApplyCommand(acq("held", 30))
	check := func(name string, c Command, want float64) {
		t.Helper()
		if n := testing.AllocsPerRun(100, func() { tb.ApplyCommand(c) }); n != want {
			t.Errorf("%s: %v allocs per run, want %v", name, n, want)
		}
	}
	check("acquire held", acq("held", 30), 0)
	check("release wrong token", rel("held", 99), 0)
	check("expire stale", exp("held", 99), 0)
	check("release free", rel("free", 1), 0)
	check("floor", flr(1), 0)
	check("invalid", acq("", 1), 0)
	k := []byte("lock/0000001")
	var tok Token
	if n := testing.AllocsPerRun(100, func() {
		tok = tb.ApplyCommand(Command{Kind: CmdAcquire, Key: k, Lease: 1}).Token
		if tb.ApplyCommand(Command{Kind: CmdRelease, Key: k, Token: tok}).Kind != Released {
			panic("release failed")
		}
	}); n != 1 {
		t.Errorf("acquire+release: %v allocs per run, want 1 (the key string)", n)
	}
}

func TestRaiseFloor(t *testing.T) {
	tb := newTable(t, 10)
	for _, tc := range []struct {
		floor, want Token
		err         error
	}{
		{5, 10, nil},
		{10, 10, nil},
		{11, 11, nil},
		{MaxToken + 1, 11, ErrFloorRange},
		{1<<64 - 1, 11, ErrFloorRange},
		{MaxToken, MaxToken, nil},
		{3, MaxToken, nil},
	} {
		got, err := tb.RaiseFloor(tc.floor)
		if got != tc.want || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Fatalf("RaiseFloor(%d) = %d, %v; want %d, %v", tc.floor, got, err, tc.want, tc.err)
		}
		if tb.LastToken() != tc.want {
			t.Fatalf("after RaiseFloor(%d): LastToken %d", tc.floor, tb.LastToken())
		}
	}
	if !tb.Exhausted() {
		t.Fatal("not exhausted at MaxToken")
	}
}
