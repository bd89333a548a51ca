package cluster

// Gate is one admission gate of docs/protocol.md section 6: it closes when its gauge reaches 90% of
// its hard limit and opens again only when the gauge drops below 75%. Between the two marks it
// keeps the state it had (hysteresis), so a gauge hovering near the limit does not flap.
//
// Gate is a pure value: the caller reads the gauge and serialises calls (the node does both
// under its mutex). A Gate with Limit <= 0 is always open.
type Gate struct {
	Limit  int
	closed bool
}

// Admit re-evaluates the gate against the current gauge value and reports whether the gate is
// open. Integer arithmetic keeps the marks exact: closed at gauge*10 >= limit*9, open again at
// gauge*4 < limit*3.
func (g *Gate) Admit(gauge int) bool {
	if g.Limit <= 0 {
		return true
	}
	if g.closed {
		if gauge*4 < g.Limit*3 {
			g.closed = false
		}
	} else if gauge*10 >= g.Limit*9 {
		g.closed = true
	}
	return !g.closed
}

// Closed reports the state left by the last Admit.
func (g *Gate) Closed() bool { return g.closed }
