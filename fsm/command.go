package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// The replicated command set and its log codec.
//
// A raft log entry carries one batch: an ordered list of commands that every
// replica applies in order, in one FSM call, each seeing the effects of the
// ones before it. One batch shares one disk sync among many client
// operations, and lets the leader put the release (or expiry) of a key and
// the grant to its next waiter into the same entry.
//
// Batch format (all integers unsigned big-endian):
//
//	batch   = version:u8 count:u32 command*count         no trailing bytes
//	command = kind:u8 body
//
// Version 1, the bodies:
//
//	Acquire (1): keylen:u8 key lease:u16                 4+len(key) bytes
//	Release (2): keylen:u8 key token:u64                 10+len(key) bytes
//	Expire  (3): keylen:u8 key token:u64                 10+len(key) bytes
//	Floor   (4): token:u64                               9 bytes
//
// Version 2 adds Extend, the extension count an Expire was made for, and
// Enable, the cluster-wide feature switch:
//
//	Acquire (1), Release (2), Floor (4): as in version 1
//	Expire  (3): keylen:u8 key token:u64 extensions:u32  14+len(key) bytes
//	Extend  (5): keylen:u8 key token:u64 lease:u16       12+len(key) bytes
//	Enable  (6): features:u32                            5 bytes
//
// An Enable's features are the bits to turn on (Features), bit 0 first
// (FeatureLeases = 0x00000001). Like Floor it has no key: it is one
// word, proposed once in the life of a cluster per feature.
//
// A version 1 Expire means extension count 0 (see CmdExpire), so version 1
// carries every command but an Extend, an Enable and an Expire for a count
// other than 0. AppendBatch writes version 1 whenever it carries the whole
// batch, and version 2 only for a batch that holds such a command: a
// cluster that never extends writes exactly the bytes latch always wrote,
// which every latch reads. DecodeBatch accepts exactly what AppendBatch
// writes: no Extend or Enable in version 1, and at least one command
// version 1 cannot carry in version 2 (any other version 2 batch is
// malformed). Every field has a fixed width, so a command has exactly one
// encoding in each version, the version is a function of the commands, and
// a decoded batch re-encodes to the same bytes.
//
// The codec is structural only: any key length 0..255, lease, token and
// count is representable, and whether a command makes sense
// (Command.Validate) is decided when it is applied, where a bad command
// yields an Invalid result instead of failing the whole batch. The one
// exception is a feature bit this latch does not know: an Enable of one
// changes the state of every replica that knows it, so a replica that does
// not cannot apply it as Invalid (it would diverge). DecodeBatch refuses
// such an entry (ErrBatchVersion), the FSM halts on it, and AppendBatch
// does not write one (ErrUnencodable). An Enable of no bit at all is
// merely invalid: every replica answers it Invalid alike.
//
// The validation rules (MaxKeyLen, MaxLease, MaxExtensions, token ranges)
// are part of the log format: every replica, and every replay of an old
// log, must decide identically. Changing any of them, or any transition in
// ApplyCommand, needs a new batch version, and every node must run code
// that knows it before the leader writes it. KnownFeatures may grow without
// one: a latch that does not know a bit halts on its Enable (see above).
//
// Mixed versions: a node that cannot decode an entry halts (FSM.Err)
// instead of skipping it. A latch that knows only version 1 (such as commit
// 653a820, the previous build the cross-build tests run) halts on a
// version 2 entry, an Enable included, so a leader must
// not propose Extend, nor an Expire for an extended holder
// (Command.MinBatchVersion), before every node runs a latch that reads
// version 2: that is what the Enable of FeatureLeases records, and the
// leader proposes it only once every member reports support. A latch that
// reads version 2 but predates Enable (commit 04b0080) decodes kind 6 as
// malformed and halts too, never skipping the switch.

// Batch format versions. BatchVersion is the newest; DecodeBatch reads
// every version from 1 to BatchVersion and rejects any other.
const (
	batchV1      = 1
	batchV2      = 2
	BatchVersion = batchV2
)

// Limits checked by Command.Validate and ApplyCommand. They restate
// docs/protocol.md section 4, which package wire enforces at the edge; the
// FSM checks them again because it must be robust to any bytes in the log.
// They are part of the log format (see above).
const (
	MaxKeyLen = 128  // bytes; keys are 1..MaxKeyLen bytes
	MaxLease  = 3600 // seconds; leases are 1..MaxLease seconds

	// MaxExtensions is the most times one holder can be extended: an
	// Extend of a holder already extended MaxExtensions times changes
	// nothing (ExtendLimit). The count never wraps, or an Expire made for
	// an old lease could match again.
	MaxExtensions = math.MaxUint32
)

const (
	batchHeaderLen = 5   // version:u8 count:u32
	minCommandLen  = 4   // an Acquire with an empty key
	maxEncodedKey  = 255 // keylen is one byte
)

// CommandKind says what a Command does. The zero value is not a kind.
type CommandKind uint8

// The command kinds. Their values are the kind byte in the log: never
// renumber them.
const (
	// CmdAcquire grants Key with Lease to a new token if Key is free.
	CmdAcquire CommandKind = 1
	// CmdRelease frees Key if and only if Token holds it.
	CmdRelease CommandKind = 2
	// CmdExpire is the leader's expiry of a lease: it frees Key if and only
	// if Token still holds it and that holder's extension count is still
	// Extensions, the count of the lease whose end the leader saw. A stale
	// expiry (the key was released, granted again, or extended since) does
	// nothing.
	//
	// A version 1 Expire carries no count and means count 0. In a log
	// written before Extend existed no holder has any other count, so
	// there it decides exactly as matching the token alone did, the rule
	// such logs were written under, and they replay identically. Matching
	// the token alone would be wrong for version 1 Expires written since:
	// AppendBatch writes an Expire for count 0 in version 1, and one made
	// for a holder's first lease must not free it once it is extended.
	CmdExpire CommandKind = 3
	// CmdFloor raises the token counter to at least Token (it never lowers
	// it): --token-floor at bootstrap, or after restoring a snapshot.
	CmdFloor CommandKind = 4
	// CmdExtend gives the holder of Key a new Lease, keeping its token, if
	// and only if Token holds Key; it counts the extension (Holder's
	// Extensions), which every later Expire of that holder must match.
	// Batch version 2 only.
	CmdExtend CommandKind = 5
	// CmdEnable turns on the feature bits in Features, cluster-wide: it
	// ORs them into the table's set and never turns a bit off (see
	// Features). Enabling a bit already on changes nothing. Batch version 2
	// only; an Enable of a bit this latch does not know does not decode.
	CmdEnable CommandKind = 6
)

var commandKindNames = [...]string{
	CmdAcquire: "acquire",
	CmdRelease: "release",
	CmdExpire:  "expire",
	CmdFloor:   "floor",
	CmdExtend:  "extend",
	CmdEnable:  "enable",
}

func (k CommandKind) String() string {
	if int(k) < len(commandKindNames) && commandKindNames[k] != "" {
		return commandKindNames[k]
	}
	return fmt.Sprintf("CommandKind(%d)", uint8(k))
}

// Command is one replicated operation on the Table. Fields a kind does not
// use are ignored and not encoded:
//
//	CmdAcquire  Key, Lease
//	CmdRelease  Key, Token
//	CmdExpire   Key, Token, Extensions
//	CmdExtend   Key, Token, Lease
//	CmdFloor    Token
//	CmdEnable   Features
//
// A Command returned by DecodeBatch has a Key that aliases the decoded bytes:
// it must not be modified, and is valid only as long as those bytes are.
type Command struct {
	Kind       CommandKind
	Features   Features // CmdEnable: the bits to turn on (here, in padding after Kind, Command stays 48 bytes)
	Key        []byte
	Lease      uint16 // seconds
	Extensions uint32 // CmdExpire: the holder's extension count the expiry was made for
	Token      Token
}

// MinBatchVersion returns the oldest batch format version that carries c:
// 2 for an Extend, an Enable, or an Expire for an extension count other
// than 0, else 1.
// AppendBatch writes a batch in the highest MinBatchVersion of its
// commands. A leader must not propose a command whose version some node
// cannot read: that node would halt on the entry.
func (c Command) MinBatchVersion() byte {
	if c.Kind == CmdExtend || c.Kind == CmdEnable || (c.Kind == CmdExpire && c.Extensions != 0) {
		return batchV2
	}
	return batchV1
}

// ErrInvalidCommand is wrapped by the errors of Command.Validate. A command
// that fails validation changes nothing and yields an Invalid result.
var ErrInvalidCommand = errors.New("fsm: invalid command")

// Validation failures; built once so that ApplyCommand does not allocate.
var (
	errUnknownKind = fmt.Errorf("%w: unknown command kind: this node is older than the one that wrote the command, upgrade it", ErrInvalidCommand)
	errKeyEmpty    = fmt.Errorf("%w: key is empty: keys are 1 to %d bytes", ErrInvalidCommand, MaxKeyLen)
	errKeyLong     = fmt.Errorf("%w: key is longer than %d bytes", ErrInvalidCommand, MaxKeyLen)
	errLease       = fmt.Errorf("%w: lease is outside 1..%d seconds", ErrInvalidCommand, MaxLease)
	errFloor       = fmt.Errorf("%w: token floor is above %s", ErrInvalidCommand, maxTokenText)
	errNoFeature   = fmt.Errorf("%w: enable names no feature: it turns on one or more known bits (%v)", ErrInvalidCommand, KnownFeatures)
	errNewFeature  = fmt.Errorf("%w: enable names a feature this latch does not know (it knows %v): "+
		"this node is older than the one that wrote the command, upgrade it", ErrInvalidCommand, KnownFeatures)
)

// Validate reports whether c can be applied, with an error wrapping
// ErrInvalidCommand if not:
//   - the kind is one of the six;
//   - Acquire, Release, Expire and Extend: the key is 1..MaxKeyLen bytes
//     (its contents, UTF-8 and whitespace, are checked at the edge by
//     package wire, not here);
//   - Acquire and Extend: the lease is 1..MaxLease seconds;
//   - Floor: the token is at most MaxToken (0 is valid and changes nothing);
//   - Enable: Features is not 0 and has only bits of KnownFeatures (bits
//     already on are valid and change nothing).
//
// Any token is valid for Release, Expire and Extend, and any extension
// count for Expire: 0, or a token that never was issued, simply never
// matches a holder.
//
// A proposer should call Validate before putting a command in a batch and
// answer the client itself: ApplyCommand rejects the same commands, but
// only after a round through the log.
func (c Command) Validate() error {
	switch c.Kind {
	case CmdAcquire, CmdExtend:
		if c.Lease == 0 || c.Lease > MaxLease {
			return errLease
		}
		return checkKey(c.Key)
	case CmdRelease, CmdExpire:
		return checkKey(c.Key)
	case CmdFloor:
		if c.Token > MaxToken {
			return errFloor
		}
		return nil
	case CmdEnable:
		switch {
		case c.Features == 0:
			return errNoFeature
		case c.Features&^KnownFeatures != 0:
			return errNewFeature
		}
		return nil
	}
	return errUnknownKind
}

func checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return errKeyEmpty
	case len(key) > MaxKeyLen:
		return errKeyLong
	}
	return nil
}

// Codec errors. DecodeBatch wraps one of them with the position and detail.
// FSM halts on either (see FSM.Err).
var (
	// ErrBatchVersion: the entry was written in a format version newer than
	// this node reads, or enables a feature bit this node does not know
	// (see Features): either way a newer latch wrote it.
	ErrBatchVersion = errors.New("fsm: log entry has a format version or a feature this latch does not know: " +
		"it was written by a newer latch; upgrade this node to the leader's version")
	// ErrBatchMalformed: the entry is not a well-formed batch of its version
	// (empty, version 0, truncated, trailing bytes, a kind that version
	// does not have, a version 2 batch that version 1 would carry). Nothing
	// in it was applied. No latch writes one: the log was damaged, or was
	// written by something other than AppendBatch.
	ErrBatchMalformed = errors.New("fsm: malformed log entry")
	// ErrUnencodable: AppendBatch was given a command it cannot encode (an
	// unknown kind, a key over 255 bytes, or an Enable of a feature bit
	// this latch does not know). Call Validate on each command before
	// batching it.
	ErrUnencodable = errors.New("fsm: command cannot be encoded: validate commands before batching them")
)

// errNeedsV2 stops a version 1 encoding at a command only version 2
// carries.
var errNeedsV2 = errors.New("fsm: command needs batch version 2")

// AppendBatch appends the encoding of cmds as one batch to b and returns
// the extended slice: in version 1 if version 1 carries every command (no
// Extend, no Enable, and every Expire for extension count 0), else in
// version 2. It fails only for a command of unknown kind, a key over 255
// bytes, or an Enable of a feature bit this latch does not know
// (ErrUnencodable: DecodeBatch would refuse the entry), and then returns b
// unchanged; commands that pass
// Validate always encode. It does not validate otherwise: an encodable but
// invalid command (lease 0, say) is carried and yields Invalid when
// applied. Fields a kind does not use are not encoded.
func AppendBatch(b []byte, cmds []Command) ([]byte, error) {
	out, err := appendBatch(b, cmds, batchV1)
	if err == errNeedsV2 {
		out, err = appendBatch(b, cmds, batchV2)
	}
	return out, err
}

// appendBatch encodes cmds in version v. In version 1 it stops at the
// first command only version 2 carries and returns b and errNeedsV2.
func appendBatch(b []byte, cmds []Command, v byte) ([]byte, error) {
	if uint64(len(cmds)) > math.MaxUint32 {
		return b, fmt.Errorf("%w: %d commands in one batch, at most %d", ErrUnencodable, len(cmds), uint32(math.MaxUint32))
	}
	start := len(b)
	b = append(b, v)
	b = binary.BigEndian.AppendUint32(b, uint32(len(cmds)))
	for i := range cmds {
		c := &cmds[i]
		switch c.Kind {
		case CmdAcquire, CmdRelease, CmdExpire, CmdExtend:
			if len(c.Key) > maxEncodedKey {
				return b[:start], fmt.Errorf("%w: command %d (%v) has a %d-byte key", ErrUnencodable, i, c.Kind, len(c.Key))
			}
			b = append(b, byte(c.Kind), byte(len(c.Key)))
			b = append(b, c.Key...)
		}
		switch c.Kind {
		case CmdAcquire:
			b = binary.BigEndian.AppendUint16(b, c.Lease)
		case CmdRelease:
			b = binary.BigEndian.AppendUint64(b, uint64(c.Token))
		case CmdExpire:
			b = binary.BigEndian.AppendUint64(b, uint64(c.Token))
			if v == batchV2 {
				b = binary.BigEndian.AppendUint32(b, c.Extensions)
			} else if c.Extensions != 0 {
				return b[:start], errNeedsV2
			}
		case CmdExtend:
			if v == batchV1 {
				return b[:start], errNeedsV2
			}
			b = binary.BigEndian.AppendUint64(b, uint64(c.Token))
			b = binary.BigEndian.AppendUint16(b, c.Lease)
		case CmdFloor:
			b = append(b, byte(CmdFloor))
			b = binary.BigEndian.AppendUint64(b, uint64(c.Token))
		case CmdEnable:
			if v == batchV1 {
				return b[:start], errNeedsV2
			}
			if c.Features&^KnownFeatures != 0 {
				return b[:start], fmt.Errorf("%w: command %d enables %v, which this latch does not know", ErrUnencodable, i, c.Features)
			}
			b = append(b, byte(CmdEnable))
			b = binary.BigEndian.AppendUint32(b, uint32(c.Features))
		default:
			return b[:start], fmt.Errorf("%w: command %d has unknown kind %d", ErrUnencodable, i, uint8(c.Kind))
		}
	}
	return b, nil
}

// DecodeBatch decodes one batch, of any version from 1 to BatchVersion, and
// appends its commands to dst, in order. It is all or nothing: on error it
// returns dst with its original length and an error wrapping
// ErrBatchVersion (a newer version, or an Enable of a feature bit this
// latch does not know) or ErrBatchMalformed. It never panics, whatever
// data holds.
//
// It copies nothing: each Key aliases data, which it never modifies (a raft
// Log.Data is shared with the log store and must stay read-only). Apart from
// growing dst it does not allocate on success.
func DecodeBatch(data []byte, dst []Command) ([]Command, error) {
	if len(data) == 0 {
		return dst, fmt.Errorf("%w: empty entry", ErrBatchMalformed)
	}
	v := data[0]
	switch {
	case v > BatchVersion:
		return dst, fmt.Errorf("%w: version %d, this node reads 1 to %d", ErrBatchVersion, v, BatchVersion)
	case v == 0:
		return dst, fmt.Errorf("%w: version 0, which no latch writes", ErrBatchMalformed)
	}
	if len(data) < batchHeaderLen {
		return dst, fmt.Errorf("%w: %d-byte entry is shorter than the %d-byte header", ErrBatchMalformed, len(data), batchHeaderLen)
	}
	count := binary.BigEndian.Uint32(data[1:])
	p := data[batchHeaderLen:]
	if uint64(count) > uint64(len(p)/minCommandLen) {
		return dst, fmt.Errorf("%w: %d commands cannot fit in %d bytes", ErrBatchMalformed, count, len(p))
	}
	tails := &keyedTails[v-1]
	needsV2 := false
	n0 := len(dst)
	dst = slices.Grow(dst, int(count))
	for i := range count {
		off := len(data) - len(p)
		if len(p) == 0 {
			return drop(dst, n0), fmt.Errorf("%w: truncated before command %d of %d", ErrBatchMalformed, i, count)
		}
		c := Command{Kind: CommandKind(p[0])}
		if c.Kind == CmdFloor {
			if len(p) < 9 {
				return drop(dst, n0), truncated(i, c.Kind, off)
			}
			c.Token = Token(binary.BigEndian.Uint64(p[1:]))
			dst = append(dst, c)
			p = p[9:]
			continue
		}
		var tail int
		if int(c.Kind) < len(tails) {
			tail = int(tails[c.Kind])
		}
		if tail == 0 { // not a keyed command of version v: off the hot path
			switch {
			case c.Kind == CmdEnable && v == batchV2:
				if len(p) < 5 {
					return drop(dst, n0), truncated(i, c.Kind, off)
				}
				c.Features = Features(binary.BigEndian.Uint32(p[1:]))
				if u := c.Features &^ KnownFeatures; u != 0 {
					return drop(dst, n0), fmt.Errorf("%w: command %d at byte %d enables %v, feature bits this latch does not know (it knows %v)",
						ErrBatchVersion, i, off, u, KnownFeatures)
				}
				dst = append(dst, c)
				p = p[5:]
				needsV2 = true
				continue
			case c.Kind == CmdExtend || c.Kind == CmdEnable:
				return drop(dst, n0), fmt.Errorf("%w: command %d at byte %d is an %v, which version 1 does not carry", ErrBatchMalformed, i, off, c.Kind)
			}
			return drop(dst, n0), fmt.Errorf("%w: command %d at byte %d has unknown kind %d", ErrBatchMalformed, i, off, p[0])
		}
		if len(p) < 2 {
			return drop(dst, n0), truncated(i, c.Kind, off)
		}
		kl := int(p[1])
		n := 2 + kl + tail
		if len(p) < n {
			return drop(dst, n0), truncated(i, c.Kind, off)
		}
		c.Key = p[2 : 2+kl : 2+kl]
		f := p[2+kl : n]
		if c.Kind == CmdAcquire {
			c.Lease = binary.BigEndian.Uint16(f)
		} else {
			c.Token = Token(binary.BigEndian.Uint64(f))
			if tail > 8 { // version 2: an Extend's lease, or an Expire's count
				if c.Kind == CmdExtend {
					c.Lease = binary.BigEndian.Uint16(f[8:])
					needsV2 = true
				} else {
					c.Extensions = binary.BigEndian.Uint32(f[8:])
					needsV2 = needsV2 || c.Extensions != 0
				}
			}
		}
		dst = append(dst, c)
		p = p[n:]
	}
	if len(p) != 0 {
		return drop(dst, n0), fmt.Errorf("%w: %d trailing bytes after %d commands", ErrBatchMalformed, len(p), count)
	}
	if v == batchV2 && !needsV2 {
		return drop(dst, n0), fmt.Errorf("%w: a version 2 batch of commands version 1 carries (no extend, no enable, no expire for a count other than 0)", ErrBatchMalformed)
	}
	return dst, nil
}

// keyedTails[v-1][kind] is the length of what follows the key of a keyed
// command in batch version v; 0 for a kind version v does not have.
var keyedTails = [2][6]uint8{
	{CmdAcquire: 2, CmdRelease: 8, CmdExpire: 8},
	{CmdAcquire: 2, CmdRelease: 8, CmdExpire: 12, CmdExtend: 10},
}

func truncated(i uint32, k CommandKind, off int) error {
	return fmt.Errorf("%w: command %d (%v) at byte %d truncated", ErrBatchMalformed, i, k, off)
}

// drop truncates dst back to n and clears what it drops, so that a failed
// decode leaves no reference into the rejected entry.
func drop(dst []Command, n int) []Command {
	clear(dst[n:])
	return dst[:n]
}
