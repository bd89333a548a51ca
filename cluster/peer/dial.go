package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// Dial connects to channel ch of the peer port at addr (host:port) and runs the handshake
// with cfg: TLS if cfg.ClientTLS is set, then the proof with cfg.Secrets[0] if the listener
// asks for one. When cfg.ID is set the dialer states its Identity (cfg.ID, cfg.Advertise)
// inside the proof (handshake version 2); if the listener does not complete that exchange,
// as a listener of an older latch does not, Dial connects once more and dials as version 1,
// stating nothing. The returned connection carries ch's protocol and has no deadline set.
//
// The connects and the handshakes together end by ctx's deadline or cfg.HandshakeTimeout,
// whichever is sooner; cancelling ctx aborts them. Errors wrap ErrRejected, ErrServerProof,
// ErrSecretRequired, ErrNoSecretOffered, ErrNotPeerPort or ErrUnknownChannel when one of
// those is the reason.
func Dial(ctx context.Context, addr string, ch byte, cfg Config) (net.Conn, error) {
	if !knownChannel(ch) {
		return nil, fmt.Errorf("peer: dial %s: channel %s: %w", addr, channelName(ch), ErrUnknownChannel)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()

	id := cfg.identity()
	conn, err := dialOnce(ctx, addr, ch, cfg, id)
	if err != nil && id.Stated() && errors.Is(err, errNoVersion2) && ctx.Err() == nil {
		cfg.logger().Debug("the listener did not take a stated identity (a node of an older latch version?); dialling again without one",
			"addr", addr, "channel", channelName(ch), "error", err)
		conn, err = dialOnce(ctx, addr, ch, cfg, Identity{})
	}
	return conn, err
}

// DialFallback dials channel ch of the peer port at addr, as Dial does, and when the
// listener refuses that channel dials channel fallback instead, once. It returns the
// connection and the channel it carries.
//
// It falls back on the listener's reject verdict only (ErrRejected): that is how a listener
// of an older latch answers a channel byte it does not know (it reads the dialer's message,
// proof included, writes 'n' and closes; doc.go), and how a listener of this one answers a
// channel whose Listener is closed. A connect that fails, a listener that closes without a
// verdict, a timeout, a wrong server proof or a hello that is no peer port's is an error of
// the dial, never a reason to take the other channel: the dialer would otherwise settle for
// the older channel with a listener that knows the newer one. The reject carries no reason,
// so a dialer whose proof is wrong falls back too; the fallback is then rejected as well and
// its error is returned, naming both channels.
//
// Both dials end by ctx's deadline, and each by cfg.HandshakeTimeout.
func DialFallback(ctx context.Context, addr string, ch, fallback byte, cfg Config) (net.Conn, byte, error) {
	conn, err := Dial(ctx, addr, ch, cfg)
	if err == nil || !errors.Is(err, ErrRejected) || ctx.Err() != nil {
		return conn, ch, err
	}
	cfg.logger().Debug("the listener refused the channel (a node of an older latch version?); dialling the fallback channel",
		"addr", addr, "channel", channelName(ch), "fallback", channelName(fallback))
	conn, ferr := Dial(ctx, addr, fallback, cfg)
	if ferr != nil {
		return nil, fallback, fmt.Errorf("%w (and before that, channel %s: %v)", ferr, channelName(ch), err)
	}
	return conn, fallback, nil
}

// dialOnce connects to addr and runs the handshake, stating id if it is stated.
func dialOnce(ctx context.Context, addr string, ch byte, cfg Config, id Identity) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("peer: dial %s: %w", addr, err)
	}
	conn, err := clientHandshake(ctx, raw, addr, ch, cfg, id)
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("peer: %s channel of %s: %w", channelName(ch), addr, err)
	}
	return conn, nil
}

// clientHandshake runs TLS (if configured) and the dialer's side of the handshake on raw,
// bounded by ctx. On error the caller closes raw.
func clientHandshake(ctx context.Context, raw net.Conn, addr string, ch byte, cfg Config, id Identity) (net.Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	// Cancelling ctx unblocks any read or write in progress.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	conn := raw
	if cfg.ClientTLS != nil {
		tc := tls.Client(raw, clientTLS(cfg.ClientTLS, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, deadlineErr(ctx, fmt.Errorf("TLS handshake: %w", err))
		}
		conn = tc
	}
	if err := dialHandshake(conn, cfg.Secrets, ch, id); err != nil {
		return nil, deadlineErr(ctx, err)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}

// deadlineErr makes err, an error of I/O bounded by ctx, wrap ctx's error when ctx is the
// reason: cancelled, or past its deadline (the connection's deadline may fire first).
func deadlineErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// clientTLS returns c, or a copy whose ServerName is addr's host when c names none, so the
// listener's certificate is checked against the address dialled.
func clientTLS(c *tls.Config, addr string) *tls.Config {
	if c.ServerName != "" {
		return c
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return c
	}
	c = c.Clone()
	c.ServerName = host
	return c
}
