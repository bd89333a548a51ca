package client

// keepAlive is a running Ticket.KeepAlive: cancel stops it, done is closed when it has.
type keepAlive struct {
	cancel func()
	done   chan struct{}
}

// stopKeepAlive stops the ticket's keep-alive, if one runs, and waits until it has: no
// extend of it is in flight afterwards.
func (t *Ticket) stopKeepAlive() {
	t.mu.Lock()
	ka := t.ka
	t.mu.Unlock()
	if ka != nil {
		ka.cancel()
		<-ka.done
	}
}
