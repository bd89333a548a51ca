package peer

import (
	"bytes"
	"testing"
)

// pinnedNonces are the client nonce 0, 1, 2, ... and the server nonce 255, 254, ... that
// the pinned proof formats are computed over.
func pinnedNonces() (client, server [nonceSize]byte) {
	for i := range client {
		client[i], server[i] = byte(i), byte(255-i)
	}
	return client, server
}

func TestProofIsHMACOfLabelChannelNonces(t *testing.T) {
	client, server := pinnedNonces()
	want := hmacOf(secretOld, []byte("latch/1 peer client"), []byte{'r'}, client[:], server[:])
	got := proof(secretOld, clientLabel, ChannelRaft, nil, &client, &server)
	if !bytes.Equal(got[:], want) {
		t.Fatalf("proof = %x, want %x", got, want)
	}
}

// Every input of a proof changes it: a proof made for one channel, direction, nonce pair or
// secret is no proof for another.
func TestProofsAreBound(t *testing.T) {
	var c1, c2, s1, s2 [nonceSize]byte
	c2[0], s2[0] = 1, 1
	base := proof(secretOld, clientLabel, ChannelRaft, nil, &c1, &s1)
	others := map[string][proofSize]byte{
		"channel":      proof(secretOld, clientLabel, ChannelForward, nil, &c1, &s1),
		"direction":    proof(secretOld, serverLabel, ChannelRaft, nil, &c1, &s1),
		"client nonce": proof(secretOld, clientLabel, ChannelRaft, nil, &c2, &s1),
		"server nonce": proof(secretOld, clientLabel, ChannelRaft, nil, &c1, &s2),
		"nonces swap":  proof(secretOld, clientLabel, ChannelRaft, nil, &s2, &c2),
		"secret":       proof(secretNew, clientLabel, ChannelRaft, nil, &c1, &s1),
	}
	for name, p := range others {
		if p == base {
			t.Errorf("changing the %s leaves the proof unchanged", name)
		}
	}
}

func TestMatchProof(t *testing.T) {
	var client, server [nonceSize]byte
	server[3] = 7
	withOld := proof(secretOld, clientLabel, ChannelAdmin, nil, &client, &server)
	withNew := proof(secretNew, clientLabel, ChannelAdmin, nil, &client, &server)
	serverSide := proof(secretNew, serverLabel, ChannelAdmin, nil, &client, &server)
	otherChannel := proof(secretNew, clientLabel, ChannelRaft, nil, &client, &server)
	tests := []struct {
		name    string
		secrets [][]byte
		got     []byte
		want    []byte // the secret matched; nil: no match
	}{
		{"only secret", [][]byte{secretNew}, withNew[:], secretNew},
		{"rotation, new proves", [][]byte{secretOld, secretNew}, withNew[:], secretNew},
		{"rotation, old proves", [][]byte{secretOld, secretNew}, withOld[:], secretOld},
		{"secret not held", [][]byte{secretOld}, withNew[:], nil},
		{"server proof reflected", [][]byte{secretNew}, serverSide[:], nil},
		{"proof for another channel", [][]byte{secretNew}, otherChannel[:], nil},
		{"short proof", [][]byte{secretNew}, withNew[:31], nil},
		{"no secrets", nil, withNew[:], nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := matchProof(tt.secrets, ChannelAdmin, nil, &client, &server, tt.got)
			if ok != (tt.want != nil) || !bytes.Equal(got, tt.want) {
				t.Fatalf("matchProof = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

func TestChannelsAreDistinctAndKnown(t *testing.T) {
	seen := map[byte]bool{}
	for _, ch := range channels {
		if seen[ch] {
			t.Fatalf("channel %q listed twice", ch)
		}
		seen[ch] = true
		if !knownChannel(ch) {
			t.Fatalf("channel %q not known", ch)
		}
	}
	for _, b := range []byte{0, 'x', 'R', helloMagic, identityMarker, verdictAccept, verdictReject, 0xff} {
		if knownChannel(b) {
			t.Errorf("byte %q is a channel", b)
		}
	}
}
