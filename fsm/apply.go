package fsm

import "fmt"

// ResultKind is what one applied command did. The zero value is not a kind.
// Results are answers, never stored in the log: their values may change.
type ResultKind uint8

// The result kinds, with the Result fields each one sets (the others are
// zero).
const (
	// Granted: an Acquire got the key. Token is the new token, Holder the
	// new holder and Key the key as stored in the table (one shared string,
	// which an expiry heap may keep instead of copying the key again).
	Granted ResultKind = iota + 1
	// Held: an Acquire found the key held. Holder is the current holder.
	Held
	// Released: a Release freed the key. Holder is the holder it freed.
	Released
	// NotHeld: a Release's or an Extend's token does not hold the key:
	// nothing changed. Holder is the current holder if another token holds
	// it, zero if the key is free.
	NotHeld
	// Expired: an Expire freed the key. Holder is the holder it freed.
	Expired
	// Stale: an Expire's token no longer holds the key (it was released, or
	// granted again), or its holder was extended since the Expire was made
	// (the extension counts differ): nothing changed. Holder is as for
	// NotHeld.
	Stale
	// Exhausted: an Acquire failed because MaxToken has been issued; every
	// later Acquire fails the same way, forever (docs/protocol.md section 4).
	Exhausted
	// Floored: a Floor was applied. Token is the last token afterwards,
	// which is the command's token or higher: the floor never lowers it.
	Floored
	// Invalid: the command failed Command.Validate and changed nothing.
	Invalid
	// Extended: an Extend's token holds the key, which now has the new
	// lease, the same token and one more extension. Holder is the holder
	// afterwards (its Extensions is the count every later Expire must
	// carry) and Key the key as the table now stores it (a map stores a
	// key anew on every write; an expiry heap may take this string in
	// place of its own, to go on sharing one copy).
	Extended
	// ExtendLimit: an Extend's token holds the key, but that holder has
	// been extended MaxExtensions times and can never be extended again:
	// nothing changed, its lease runs on as it was. Holder is the holder.
	// To go on, release and acquire again, for a new token.
	ExtendLimit
	// Enabled: an Enable was applied. Features is the table's feature set
	// afterwards: the bits it had, and the command's (enabling a bit
	// already on changes nothing and answers Enabled too).
	Enabled
)

// lastResultKind is the highest ResultKind, for tests that walk them all.
const lastResultKind = Enabled

var resultKindNames = [...]string{
	Granted:     "granted",
	Held:        "held",
	Released:    "released",
	NotHeld:     "not_held",
	Expired:     "expired",
	Stale:       "stale",
	Exhausted:   "exhausted",
	Floored:     "floored",
	Invalid:     "invalid",
	Extended:    "extended",
	ExtendLimit: "extend_limit",
	Enabled:     "enabled",
}

func (k ResultKind) String() string {
	if int(k) < len(resultKindNames) && resultKindNames[k] != "" {
		return resultKindNames[k]
	}
	return fmt.Sprintf("ResultKind(%d)", uint8(k))
}

// Result is what one applied command did; ResultKind says which fields are
// set.
type Result struct {
	Kind     ResultKind
	Features Features // Enabled: the feature set afterwards (in padding after Kind: Result stays 48 bytes)
	Token    Token    // Granted: the new token; Floored: the last token afterwards
	Holder   Holder   // Granted, Extended: the new holder; Held, NotHeld, Stale, ExtendLimit: the current one; Released, Expired: the freed one
	Key      string   // Granted, Extended: the key as the table stores it
}

// ApplyCommand is the single deterministic transition of the lock table:
// both modes go through it (single mode under the node's mutex, cluster
// mode from the raft FSM for every command of every committed batch). It
// validates c (Invalid if Validate fails, changing nothing), then:
//
//	Acquire  Exhausted once MaxToken has been issued (even if the key is
//	         held); else Held if the key is held; else Granted
//	Release  Released if Token holds the key, else NotHeld
//	Expire   Expired if Token still holds the key and its holder's
//	         extension count is Extensions, else Stale
//	Extend   NotHeld unless Token holds the key; else ExtendLimit if the
//	         holder has been extended MaxExtensions times; else Extended:
//	         the holder keeps its token, takes the new lease, and counts
//	         one more extension (the token counter does not move, so an
//	         exhausted counter does not stop an Extend)
//	Floor    Floored, with the counter raised to at least Token
//	Enable   Enabled, with Features ORed into the feature set (never a
//	         bit turned off)
//
// It reads no clock and no random source and does not allocate, except the
// key string of a grant or an extension.
func (t *Table) ApplyCommand(c Command) Result {
	if c.Validate() != nil {
		return Result{Kind: Invalid}
	}
	switch c.Kind {
	case CmdAcquire:
		tok, k, err := t.Acquire(c.Key, c.Lease)
		switch err {
		case nil:
			return Result{Kind: Granted, Token: tok, Holder: Holder{Token: tok, Lease: c.Lease}, Key: k}
		case ErrHeld:
			h, _ := t.Holder(c.Key)
			return Result{Kind: Held, Holder: h}
		default: // ErrTokenExhausted, the only other error of Acquire
			return Result{Kind: Exhausted}
		}
	case CmdRelease:
		h, ok := t.Holder(c.Key)
		if ok && t.Release(c.Key, c.Token) {
			return Result{Kind: Released, Holder: h}
		}
		return Result{Kind: NotHeld, Holder: h}
	case CmdExpire:
		h, ok := t.Holder(c.Key)
		if ok && h.Extensions == c.Extensions && t.Release(c.Key, c.Token) {
			return Result{Kind: Expired, Holder: h}
		}
		return Result{Kind: Stale, Holder: h}
	case CmdExtend:
		h, k, err := t.Extend(c.Key, c.Token, c.Lease)
		switch err {
		case nil:
			return Result{Kind: Extended, Holder: h, Key: k}
		case ErrExtendLimit:
			return Result{Kind: ExtendLimit, Holder: h}
		default: // ErrNotHeld, the only other error of Extend
			return Result{Kind: NotHeld, Holder: h}
		}
	case CmdEnable:
		t.features |= c.Features // Validate admitted known bits only
		return Result{Kind: Enabled, Features: t.features}
	default: // CmdFloor; Validate admitted nothing else
		last, _ := t.RaiseFloor(c.Token) // Validate checked the range
		return Result{Kind: Floored, Token: last}
	}
}
