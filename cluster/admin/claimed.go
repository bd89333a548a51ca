package admin

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// claimChunk is the first buffer readClaimed allocates: what a peer that announces a backup
// and sends nothing costs.
const claimChunk = 64 << 10

// readClaimed reads exactly size bytes that the other side announced, without taking its word
// for it: the buffer starts at claimChunk and at most doubles each time it is full, never past
// size, so memory follows the bytes that arrived (at most twice them, plus the copy of a
// growth) and never the number claimed. size must be 0..MaxSnapshot.
func readClaimed(r io.Reader, size int64) ([]byte, error) {
	if size < 0 || size > MaxSnapshot {
		return nil, fmt.Errorf("admin: %d bytes announced, outside 0..%d", size, MaxSnapshot)
	}
	buf := make([]byte, 0, min(size, claimChunk))
	for int64(len(buf)) < size {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(size, 2*int64(cap(buf))))-len(buf))
		}
		n, err := r.Read(buf[len(buf):min(int64(cap(buf)), size)])
		buf = buf[:len(buf)+n]
		switch {
		case int64(len(buf)) == size:
			return buf, nil
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("admin: %d of %d announced bytes: %w", len(buf), size, io.ErrUnexpectedEOF)
		case err != nil:
			return nil, err
		}
	}
	return buf, nil
}
