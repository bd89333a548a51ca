package clustertest

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects output (a process's stderr, a logger's lines) while a test reads it; it is
// safe for concurrent use. The zero Buffer is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what has been written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Count counts the occurrences of s in what has been written so far.
func (l *Buffer) Count(s string) int {
	return strings.Count(l.String(), s)
}
