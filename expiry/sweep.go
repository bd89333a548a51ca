package expiry

import "time"

// SweepInterval is the single-mode sweep period, a compile-time constant
// (docs/protocol.md section 6): a lease may be freed up to this much after its
// end, never before.
const SweepInterval = 5 * time.Second

// SweepChunk is the most due holders a sweep expires per hold of its owner's
// lock; the owner releases the lock between chunks, so that one sweep of a
// million leases never stalls request handling for long.
const SweepChunk = 1024
