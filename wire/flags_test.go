package wire

import (
	"errors"
	"testing"
	"time"
)

// The hello flags of revision 2 (flags.go): what a server echoes, what a client accepts, and
// the age a server writes into a G.

func TestEchoFlags(t *testing.T) {
	for _, tc := range []struct{ client, supported, want uint8 }{
		{0, 0, 0},          // latch/1 both sides
		{0, FlagLeases, 0}, // old client, new server: latch/1
		{FlagLeases, 0, 0}, // new client, old server (or one that does not serve the revision)
		{FlagLeases, FlagLeases, FlagLeases},
		{FlagAuthRequired, FlagLeases, 0}, // bit 0 means nothing from a client
		{0xFF, FlagLeases, FlagLeases},    // unknown client bits are ignored
		{0xFC, FlagLeases, 0},
		{0xFF, 0xFF, OfferFlags}, // a server echoes only offers
	} {
		if got := EchoFlags(tc.client, tc.supported); got != tc.want {
			t.Errorf("EchoFlags(%#x, %#x) = %#x, want %#x", tc.client, tc.supported, got, tc.want)
		}
	}
}

func TestAcceptFlags(t *testing.T) {
	for _, tc := range []struct {
		offered, server, want uint8
		err                   error
	}{
		{0, 0, 0, nil},
		{0, FlagAuthRequired, 0, nil},
		{FlagLeases, 0, 0, nil}, // an old server: latch/1
		{FlagLeases, FlagAuthRequired, 0, nil},
		{FlagLeases, FlagLeases, FlagLeases, nil},
		{FlagLeases, FlagLeases | FlagAuthRequired, FlagLeases, nil},
		{FlagLeases, 0xFC &^ FlagLeases, 0, nil}, // bits no revision defines: ignored
		{FlagLeases, 0xFF, FlagLeases, nil},      // the same, with the echo
		{0, FlagLeases, 0, ErrFlagNotOffered},    // an echo of nothing
		{0, FlagLeases | FlagAuthRequired, 0, ErrFlagNotOffered},
		{FlagAuthRequired, FlagLeases, 0, ErrFlagNotOffered}, // bit 0 is no offer
	} {
		got, err := AcceptFlags(tc.offered, tc.server)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("AcceptFlags(%#x, %#x) = %#x, %v; want %#x, %v", tc.offered, tc.server, got, err, tc.want, tc.err)
		}
	}
	for c := range 256 {
		for s := range 256 {
			// Whatever the server supports, its echo is accepted by the client that offered.
			if got, err := AcceptFlags(uint8(c), EchoFlags(uint8(c), uint8(s))|FlagAuthRequired); err != nil || got != uint8(c&s)&OfferFlags {
				t.Fatalf("client %#x, server supports %#x: AcceptFlags = %#x, %v", c, s, got, err)
			}
		}
	}
}

func TestAgeMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{
		{-time.Second, 0},
		{0, 0},
		{999 * time.Microsecond, 0},
		{time.Millisecond, 1},
		{2*time.Millisecond - 1, 1},
		{255 * time.Second, 255000},
		{255*time.Second + 999999, 255000},
		{MaxAge * time.Millisecond, MaxAge},
		{(MaxAge + 1) * time.Millisecond, MaxAge},
		{1<<63 - 1, MaxAge},
	} {
		got := AgeMillis(tc.d)
		if got != tc.want {
			t.Errorf("AgeMillis(%v) = %d, want %d", tc.d, got, tc.want)
		}
		if time.Duration(got)*time.Millisecond > max(tc.d, 0) {
			t.Errorf("AgeMillis(%v) = %d ms overestimates", tc.d, got)
		}
	}
}
