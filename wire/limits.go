package wire

import "time"

// Protocol constants of latch/1 (docs/protocol.md sections 3, 4, 6 and 8). Every
// limit the protocol names lives here, once.
const (
	// MaxFrame is the longest frame, LF included, that a decoder accepts.
	// When MaxFrame bytes of one frame have been read without its LF, the
	// frame is oversized (section 3).
	MaxFrame = 192

	// MaxKey is the longest key in bytes (not characters).
	MaxKey = 128

	// ReadBuffer is the size of the server's read buffer per connection.
	ReadBuffer = 4096

	// ReplyBatch is the most reply frames the server coalesces into one write.
	ReplyBatch = 64

	// ProgressTimeout bounds the time from the first byte of a frame to its
	// LF. A frame that has not finished by then is answered E bad_request and
	// the connection closes.
	ProgressTimeout = 5 * time.Second

	// HandshakeTimeout bounds the time from accept to the end of the
	// handshake (section 8).
	HandshakeTimeout = 5 * time.Second

	// WriteStallTimeout is how long the server waits for a client that does
	// not read its replies before it disconnects it.
	WriteStallTimeout = 5 * time.Second

	// Version is the protocol version sent in hello frames.
	Version = 1

	// FlagAuthRequired is bit 0 of the server hello flags: the client must
	// send a V proof before any request. Only a server sets it.
	FlagAuthRequired = 1

	// FlagLeases is bit 1 of the hello flags, an offer: a client sets it to
	// offer revision 2 (grants that carry their age, extend), a server that
	// implements the revision echoes it, and only on a connection whose two
	// hellos both set it do the frames of revision 2 appear
	// (docs/protocol.md; EchoFlags, AcceptFlags).
	FlagLeases = 1 << 1

	// NonceSize is the length of a hello nonce in bytes.
	NonceSize = 32

	// ProofSize is the length of a V proof (an HMAC-SHA256) in bytes.
	ProofSize = 32

	// MinSecretLen is the shortest shared secret accepted, in bytes.
	MinSecretLen = 32

	// MaxToken is the largest fencing token ever granted, so that tokens fit
	// a signed 64-bit column. After it, acquires fail with token_exhausted.
	MaxToken uint64 = 1<<63 - 1

	// MinLease is the shortest lease in seconds an acquire may ask for.
	MinLease = 1

	// MaxLease is the longest lease in seconds an acquire may ask for.
	MaxLease = 3600

	// MaxWait is the longest wait in seconds an acquire can carry (u8).
	MaxWait = 255

	// MaxReasonLen is the longest E reason in bytes.
	MaxReasonLen = 32

	// MaxAge is the largest age of a G grant, in milliseconds (u32, about 49.7
	// days). A longer wait is sent as MaxAge: less than it was, never more.
	MaxAge = 1<<32 - 1
)

// maxValidFrame is the longest frame a correct peer ever sends on a latch/1
// connection: R with a MaxKey key. MaxFrame leaves room above it.
const maxValidFrame = 1 + 16 + MaxKey + 1

// maxValidFrameLeases is the longest frame a correct peer ever sends on a
// connection with FlagLeases: L (extend) with a MaxKey key, 148 bytes.
const maxValidFrameLeases = 1 + 18 + MaxKey + 1
