package fsm

import (
	"fmt"
	"strings"
)

// Features is a set of cluster-wide feature bits: behaviour that every
// member of a cluster has agreed to, committed in the log by an Enable
// command (CmdEnable), like etcd's cluster version. The bits are one-way:
// an Enable only ever turns bits on, nothing turns one off, and a snapshot
// carries them, so every replica at the same index has the same set.
//
// Who turns a bit on: the leader, once every member reports that it
// supports the bit (package fsm knows nothing of members); a member added
// after that must support it too, since an older one refuses the snapshot
// (version 3) and halts on the Enable in the log. Who reads it:
// any goroutine, through FSM.Features or FSM.Read and Table.Features, on
// every replica; single mode through its Table.
//
// The set is a record for the node, not a rule of the table: no other
// transition of ApplyCommand looks at it. A log written before the switch
// existed (batch version 2 extends without any Enable, testdata/log_v2.txt)
// must replay exactly as it applied then, so the FSM cannot refuse an
// Extend for want of FeatureLeases; the leader gates what it proposes and
// offers instead.
//
// A bit this latch does not know is never skipped: DecodeBatch refuses an
// Enable of one (ErrBatchVersion) and ReadSnapshot a snapshot with one
// (ErrSnapshotVersion), so a node that is too old halts (FSM.Err) instead
// of going on with a state that lacks what the others applied. A new
// feature bit therefore needs no new batch version of its own.
type Features uint32

// The feature bits. Their values are written in the log and in snapshots:
// never renumber them.
const (
	// FeatureLeases: protocol revision 2 is in force cluster-wide: grant
	// age, and extend (CmdExtend, batch version 2). Every member reads
	// batch version 2, so the leader may propose extends, and servers may
	// offer the revision to clients.
	FeatureLeases Features = 1 << 0
)

// KnownFeatures is every feature bit this latch knows: what it reports as
// supported, and the only bits it applies. An Enable of any other bit is
// an entry this latch cannot apply.
const KnownFeatures = FeatureLeases

var featureNames = [...]string{
	0: "leases",
}

// Has reports whether every bit of g is in f.
func (f Features) Has(g Features) bool { return f&g == g }

// String names the bits, in bit order, joined by "|"; bits this latch does
// not know are shown as one hex number at the end; "none" for no bit.
func (f Features) String() string {
	if f == 0 {
		return "none"
	}
	var b strings.Builder
	for i, name := range featureNames {
		if f&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(name)
		}
	}
	if u := f &^ KnownFeatures; u != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint32(u))
	}
	return b.String()
}
