package forward

// FailBeforeNextWrite makes l's next write find its connection failed, as if the reader had
// failed, after the batch was registered and before its Write began.
func FailBeforeNextWrite(l *Link) {
	h := func(c *conn) {
		l.beforeWrite.Store(nil)
		l.fail(c, "test: the reader failed before the write", nil)
	}
	l.beforeWrite.Store(&h)
}
