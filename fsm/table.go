package fsm

// Holder is the current holder of a key. It is 16 bytes with no pointers
// (see the package doc's Memory section).
type Holder struct {
	Token      Token  // the token granted; never 0
	Lease      uint16 // lease length in seconds: as granted, or as the last Extend set it
	Extensions uint32 // how many times Extend gave this holder a new lease; 0..MaxExtensions
}

// Table is the deterministic lock table: key -> holder, and the global token
// counter.
//
// A Table is not safe for concurrent use. Its one caller serialises access:
// in single mode the node, under its mutex; in cluster mode raft's FSM
// goroutine (Apply, Restore), with readers going through the FSM adapter's
// lock. The zero value is an empty table with floor 0; NewTable sets another
// floor.
type Table struct {
	held     map[string]Holder // held keys only; a free key has no entry
	last     Token             // last token issued; the floor before any grant
	features Features          // cluster-wide feature bits turned on; only ever gains bits
}

// NewTable returns an empty table whose first grant is floor+1. floor may be
// 0..MaxToken; with floor == MaxToken every acquire fails with
// ErrTokenExhausted. A floor above MaxToken returns ErrFloorRange.
func NewTable(floor Token) (*Table, error) {
	if floor > MaxToken {
		return nil, ErrFloorRange
	}
	return &Table{held: make(map[string]Holder), last: floor}, nil
}

// Acquire grants key to a new holder with the given lease if the key is free,
// and returns the new token and the key as a string owned by the table. That
// string is allocated once per grant; the caller may keep it (for example in
// an expiry heap entry) instead of copying the key again.
//
// Errors, checked in this order, leave the table unchanged:
//   - ErrTokenExhausted once MaxToken has been issued, for every key, held or
//     not: no acquire can succeed again (docs/protocol.md section 4);
//   - ErrHeld if the key has a holder; tok is then that holder's token.
//
// The lease is stored as given; its range is checked at the edge.
func (t *Table) Acquire(key []byte, lease uint16) (tok Token, k string, err error) {
	if t.last >= MaxToken {
		return 0, "", ErrTokenExhausted
	}
	if h, ok := t.held[string(key)]; ok {
		return h.Token, "", ErrHeld
	}
	if t.held == nil {
		t.held = make(map[string]Holder)
	}
	t.last++
	k = string(key)
	t.held[k] = Holder{Token: t.last, Lease: lease}
	return t.last, k, nil
}

// Holder returns key's current holder, if any. It does not allocate.
func (t *Table) Holder(key []byte) (Holder, bool) {
	h, ok := t.held[string(key)]
	return h, ok
}

// Release frees key if and only if tok is its current holder's token, and
// reports whether it did. Token 0 never matches. A false result changes
// nothing. It does not allocate.
func (t *Table) Release(key []byte, tok Token) bool {
	h, ok := t.held[string(key)]
	if !ok || tok == 0 || h.Token != tok {
		return false
	}
	delete(t.held, string(key))
	return true
}

// Extend gives key's holder a new lease, keeping its token, if and only if
// tok is that holder's token, and counts the extension. It returns the
// holder afterwards and the key as a string the table now stores (a map
// stores its key anew on every write, so this costs one allocation of the
// key; the caller may keep the string instead of its own copy).
//
// Errors, checked in this order, leave the table unchanged and return the
// current holder (zero if the key is free) and no key:
//   - ErrNotHeld if tok does not hold key (token 0 never does);
//   - ErrExtendLimit if the holder has been extended MaxExtensions times:
//     the count never wraps.
//
// The lease is stored as given; its range is checked at the edge. The
// token counter is not involved: an exhausted table still extends.
func (t *Table) Extend(key []byte, tok Token, lease uint16) (h Holder, k string, err error) {
	h, ok := t.held[string(key)]
	switch {
	case !ok || tok == 0 || h.Token != tok:
		return h, "", ErrNotHeld
	case h.Extensions >= MaxExtensions:
		return h, "", ErrExtendLimit
	}
	h.Lease = lease
	h.Extensions++
	k = string(key)
	t.held[k] = h
	return h, k, nil
}

// Restore puts a holder back into the table while rebuilding it from a
// snapshot: build the table with NewTable(lastToken), then Restore each
// holder. The table keeps key as given. It returns ErrTokenRange if h.Token
// is 0 or above LastToken, and ErrHeld if key already has a holder; either
// way the table is unchanged. It does not check that tokens are unique
// across keys.
func (t *Table) Restore(key string, h Holder) error {
	if h.Token == 0 || h.Token > t.last {
		return ErrTokenRange
	}
	if _, ok := t.held[key]; ok {
		return ErrHeld
	}
	if t.held == nil {
		t.held = make(map[string]Holder)
	}
	t.held[key] = h
	return nil
}

// Features returns the cluster-wide feature bits turned on by Enable
// commands (0 for a new table, and after restoring a snapshot written
// before features existed). Bits are never turned off.
func (t *Table) Features() Features { return t.features }

// Len returns the number of held keys.
func (t *Table) Len() int { return len(t.held) }

// LastToken returns the last token issued, or the floor before any grant.
// The next grant, if any, is LastToken()+1.
func (t *Table) LastToken() Token { return t.last }

// Exhausted reports whether MaxToken has been issued (or was the floor), so
// that every acquire fails with ErrTokenExhausted.
func (t *Table) Exhausted() bool { return t.last >= MaxToken }

// Range calls fn for every held key, in unspecified order, until fn returns
// false. It is used to rebuild expiry state and to write snapshots. fn must
// not modify the table.
func (t *Table) Range(fn func(key string, h Holder) bool) {
	for k, h := range t.held {
		if !fn(k, h) {
			return
		}
	}
}

// RaiseFloor raises the token counter to at least floor, so that the next
// grant is above it, and returns the last token afterwards. It never lowers
// the counter: a floor at or below LastToken changes nothing. Raising it to
// MaxToken exhausts the table: every later acquire fails. A floor above
// MaxToken returns ErrFloorRange and changes nothing. Holders are untouched.
func (t *Table) RaiseFloor(floor Token) (Token, error) {
	if floor > MaxToken {
		return t.last, ErrFloorRange
	}
	if floor > t.last {
		t.last = floor
	}
	return t.last, nil
}
