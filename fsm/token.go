package fsm

import "fmt"

// Token is a fencing token: 1..MaxToken, strictly increasing across all
// grants of all keys. 0 is never issued, so it never matches a holder.
type Token uint64

// MaxToken is the last token that can be issued: 2^63-1, so that every token
// fits a signed 64-bit database column (docs/protocol.md section 4).
const MaxToken Token = 1<<63 - 1

// maxTokenText is MaxToken as messages print it.
var maxTokenText = fmt.Sprintf("%d (2^63-1)", MaxToken)
