package server

import (
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/wire"
)

// Router sends the acquires and releases of a node that does not decide them itself (a
// cluster follower) to the node that does (the leader). Set it in Config.Router; nil (single
// mode) means every request is decided by the local node.
//
// A session's reader goroutine calls both methods, for each checked acquire or release, in
// the order the frames were read; pings are always answered locally.
type Router interface {
	// Local reports whether the local node decides requests now (it is the leader). When it
	// returns false the session calls Forward instead of the node.
	Local() bool
	// Forward sends req on and delivers exactly one answer, with req.Owner, to out: the
	// leader's answer, or E unavailable / E indeterminate when the request could not be sent
	// or its fate is unknown. readAt is when the session read the frame; an acquire's wait
	// counts from it. req (and req.Key, which aliases the session's decoder) is valid only
	// during the call: copy what is kept. Forward must not block on the network, and out must
	// not be called with a lock held that out's Reply could need.
	Forward(req *wire.Request, readAt time.Time, out cluster.Replier)
}
