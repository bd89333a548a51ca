package fsm

import (
	"errors"
	"fmt"
)

var (
	// ErrTokenExhausted is returned by every acquire once MaxToken has been
	// issued. It is permanent for the table: the counter never wraps.
	ErrTokenExhausted = errors.New("fsm: token counter exhausted: the last token, " + maxTokenText + ", " +
		"has been issued, so no lock can ever be granted again by this state (releases and expiry still work); " +
		"tokens never wrap. This almost always means --token-floor was set too close to the maximum. " +
		"To recover, reset the stored fencing tokens in every resource that checks them, then start a fresh " +
		"single server or bootstrap a fresh cluster with a lower --token-floor")

	// ErrHeld is returned by Acquire when the key already has a holder, and
	// by Restore when a snapshot names a key twice.
	ErrHeld = errors.New("fsm: key is held: wait for its release or the end of its lease")

	// ErrNotHeld is returned by Extend when the token does not hold the
	// key: it was released, expired, or never granted to that token.
	ErrNotHeld = errors.New("fsm: the token does not hold the key: it was released or has expired; acquire it again")

	// ErrExtendLimit is returned by Extend when the holder has been
	// extended MaxExtensions times; its lease runs on as it was.
	ErrExtendLimit = errors.New("fsm: the holder has been extended as often as it can be: " +
		"its lease was not changed; release the key and acquire it again for a new token")

	// ErrFloorRange is returned by NewTable when the floor is above MaxToken.
	ErrFloorRange = fmt.Errorf("fsm: token floor is above %s: "+
		"choose a --token-floor from 0 to %d; the first token is floor+1", maxTokenText, MaxToken)

	// ErrTokenRange is returned by Restore for a holder whose token is 0 or
	// above the table's last token: such a snapshot was not written by a
	// Table and must not be trusted.
	ErrTokenRange = errors.New("fsm: restored holder's token is 0 or above the last token issued: " +
		"the snapshot is corrupt; restore from another snapshot or peer")
)
