package peer

import (
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

func TestSecretAccepted(t *testing.T) {
	cfg := testConfig(t, secretNew)
	m := listen(t, cfg)
	c := dial(t, m.Addr().String(), ChannelRaft, cfg)
	sayAndHear(t, c, accept(t, m.Listener(ChannelRaft)), "proven")
}

// The listener holds [old, new] during a rotation; a dialer proving with either gets in,
// and a listener that has dropped old turns away a dialer still proving with it.
func TestSecretRotation(t *testing.T) {
	m := listen(t, testConfig(t, secretOld, secretNew))
	addr := m.Addr().String()
	for _, dialer := range []struct {
		name    string
		secrets [][]byte
	}{
		{"new first", [][]byte{secretNew, secretOld}},
		{"old first", [][]byte{secretOld, secretNew}},
		{"only new", [][]byte{secretNew}},
		{"only old", [][]byte{secretOld}},
	} {
		t.Run(dialer.name, func(t *testing.T) {
			c := dial(t, addr, ChannelForward, testConfig(t, dialer.secrets...))
			sayAndHear(t, c, accept(t, m.Listener(ChannelForward)), dialer.name)
		})
	}

	done := listen(t, testConfig(t, secretNew))
	if err := dialErr(t, done.Addr().String(), ChannelRaft, testConfig(t, secretOld, secretNew)); !errors.Is(err, ErrRejected) {
		t.Fatalf("dialer proving with a dropped secret: %v, want ErrRejected", err)
	}
}

// Moving a cluster from one shared secret (old: --secret-file was the peer secret too) to a
// peer secret of its own (deploy/README.md): an old-config node holds [shared]; an upgraded
// node first holds [shared, peer] and talks to it both ways; once every node accepts peer,
// [peer, shared] proves peer; a node still on [shared] alone is then turned away, which is why
// the procedure waits for the first roll to end before the second.
func TestUpgradeFromOneSharedSecret(t *testing.T) {
	shared, peerOnly := secretOld, secretNew
	old := listen(t, testConfig(t, shared))
	step1 := listen(t, testConfig(t, shared, peerOnly))
	for _, c := range []struct {
		name string
		to   *Mux
		cfg  Config
	}{
		{"step 1 dials an old node", old, testConfig(t, shared, peerOnly)},
		{"an old node dials step 1", step1, testConfig(t, shared)},
		{"step 2 dials step 1", step1, testConfig(t, peerOnly, shared)},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, c.to.Addr().String(), ChannelRaft, c.cfg)
			sayAndHear(t, conn, accept(t, c.to.Listener(ChannelRaft)), c.name)
		})
	}
	if err := dialErr(t, old.Addr().String(), ChannelRaft, testConfig(t, peerOnly, shared)); !errors.Is(err, ErrRejected) {
		t.Fatalf("step 2 dialing a node that never got the peer secret: %v, want ErrRejected", err)
	}
}

// A wrong secret gets the dialer an error and the listener never hands the connection on.
func TestWrongSecretRejected(t *testing.T) {
	m := listen(t, testConfig(t, secretOld, secretNew))
	for _, ch := range channels {
		if err := dialErr(t, m.Addr().String(), ch, testConfig(t, secretWrong)); !errors.Is(err, ErrRejected) {
			t.Fatalf("Dial(%s) with a wrong secret = %v, want ErrRejected", channelName(ch), err)
		}
	}
	st := settled(t, m)
	if st.Rejected != uint64(len(channels)) || st.Accepted != 0 {
		t.Fatalf("stats %+v, want %d rejected, 0 accepted", st, len(channels))
	}
	for _, ch := range channels {
		if n := queued(m, ch); n != 0 {
			t.Fatalf("%s channel holds %d connections after wrong secrets", channelName(ch), n)
		}
	}
}

// Secrets on one side only never talk: each side says what is missing.
func TestSecretMismatchOfModes(t *testing.T) {
	withSecret := listen(t, testConfig(t, secretNew))
	if err := dialErr(t, withSecret.Addr().String(), ChannelRaft, testConfig(t)); !errors.Is(err, ErrSecretRequired) {
		t.Fatalf("dialer without a secret = %v, want ErrSecretRequired", err)
	}
	without := listen(t, testConfig(t))
	if err := dialErr(t, without.Addr().String(), ChannelRaft, testConfig(t, secretNew)); !errors.Is(err, ErrNoSecretOffered) {
		t.Fatalf("dialer with a secret to a listener without = %v, want ErrNoSecretOffered", err)
	}
	if st := settled(t, without); st.Accepted != 0 {
		t.Fatalf("stats %+v: the downgraded connection was handed on", st)
	}
}

// A raw connection that writes the channel byte and then data, with no proof, is refused and
// never reaches the channel.
func TestNoProofRejected(t *testing.T) {
	m := listen(t, testConfig(t, secretNew))
	c := rawDial(t, m.Addr().String())
	readHello(t, c)
	junk := make([]byte, 1+proofMsgSize)
	junk[0] = ChannelRaft
	if _, err := c.Write(junk); err != nil {
		t.Fatal(err)
	}
	verdict := make([]byte, 1)
	if _, err := io.ReadFull(c, verdict); err != nil || verdict[0] != verdictReject {
		t.Fatalf("verdict %q, %v; want %q", verdict, err, verdictReject)
	}
	if st := settled(t, m); st.Rejected != 1 || queued(m, ChannelRaft) != 0 {
		t.Fatalf("stats %+v, queued %d; want 1 rejected and nothing queued", st, queued(m, ChannelRaft))
	}
}

// A relay between an honest dialer and the listener passes the dialer's proof for the admin
// channel on but asks for the raft channel: the channel is inside the MAC, so it is refused.
// Relayed unchanged, the same exchange is accepted (the relay itself works).
func TestProofForAnotherChannelRejected(t *testing.T) {
	cfg := testConfig(t, secretNew)
	m := listen(t, cfg)
	for _, tc := range []struct {
		name    string
		rewrite byte // channel byte the relay sends; 0: the dialer's
		wantErr error
	}{
		{"relayed unchanged", 0, nil},
		{"channel rewritten", ChannelRaft, ErrRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay := fakeListener(t, func(d net.Conn) {
				up, err := net.Dial("tcp", m.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				defer func() { _ = up.Close() }()
				hello := make([]byte, helloSize)
				if _, err := io.ReadFull(up, hello); err != nil {
					t.Error(err)
					return
				}
				_, _ = d.Write(hello)
				msg := make([]byte, 1+proofMsgSize)
				if _, err := io.ReadFull(d, msg); err != nil {
					t.Error(err)
					return
				}
				if tc.rewrite != 0 {
					msg[0] = tc.rewrite
				}
				_, _ = up.Write(msg)
				_ = up.SetDeadline(time.Now().Add(clustertest.Bound))
				_, _ = io.CopyN(d, up, 1+proofSize) // the verdict and, if accepted, the proof
			})
			err := dialErr(t, relay, ChannelAdmin, cfg)
			if !errors.Is(err, tc.wantErr) && (err != nil || tc.wantErr != nil) {
				t.Fatalf("Dial through the relay = %v, want %v", err, tc.wantErr)
			}
		})
	}
	st := settled(t, m)
	if st.Rejected != 1 || st.Accepted != 1 || queued(m, ChannelRaft) != 0 {
		t.Fatalf("stats %+v, want 1 accepted (admin), 1 rejected, no raft connection", st)
	}
}

// A fake listener that does not hold the secret cannot make the dialer use its connection:
// whatever it answers in place of the server proof, the dialer refuses it.
func TestServerProofVerified(t *testing.T) {
	answers := map[string]func(hello, msg []byte) []byte{
		"random proof": func(_, _ []byte) []byte {
			p := make([]byte, proofSize)
			_, _ = rand.Read(p)
			return p
		},
		"dialer's proof reflected": func(_, msg []byte) []byte { return msg[1+nonceSize:] },
		"proof with another secret": func(hello, msg []byte) []byte {
			p := proof(secretWrong, serverLabel, msg[0], nil, (*[nonceSize]byte)(msg[1:1+nonceSize]), (*[nonceSize]byte)(hello[3:]))
			return p[:]
		},
		"proof for another channel": func(hello, msg []byte) []byte {
			p := proof(secretNew, serverLabel, ChannelAdmin, nil, (*[nonceSize]byte)(msg[1:1+nonceSize]), (*[nonceSize]byte)(hello[3:]))
			return p[:]
		},
		"no proof": func(_, _ []byte) []byte { return nil },
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			addr := fakeListener(t, func(c net.Conn) {
				hello := make([]byte, helloSize)
				hello[0], hello[1], hello[2] = helloMagic, helloVersion, flagSecret
				_, _ = rand.Read(hello[3:])
				_, _ = c.Write(hello)
				msg := make([]byte, 1+proofMsgSize)
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				_, _ = c.Write(append([]byte{verdictAccept}, answer(hello, msg)...))
			})
			err := dialErr(t, addr, ChannelRaft, testConfig(t, secretNew))
			if err == nil {
				t.Fatal("Dial accepted a listener that does not hold the secret")
			}
			if name != "no proof" && !errors.Is(err, ErrServerProof) {
				t.Fatalf("Dial = %v, want ErrServerProof", err)
			}
		})
	}
}
