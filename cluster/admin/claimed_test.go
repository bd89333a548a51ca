package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/raftnode"

	"github.com/latchd/latch/cluster/clustertest"
)

func TestReadClaimed(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 50_000) // 800 KB: several doublings
	for _, tc := range []struct {
		name string
		r    io.Reader
		size int64
		want []byte
		err  error
	}{
		{"empty", bytes.NewReader(nil), 0, []byte{}, nil},
		{"whole", bytes.NewReader(data), int64(len(data)), data, nil},
		{"a byte at a time", iotest.OneByteReader(bytes.NewReader(data[:100_000])), 100_000, data[:100_000], nil},
		{"more follows", bytes.NewReader(data), 1000, data[:1000], nil},
		{"cut short", bytes.NewReader(data[:10]), 1 << 20, nil, io.ErrUnexpectedEOF},
		{"too big", bytes.NewReader(nil), MaxSnapshot + 1, nil, nil},
		{"negative", bytes.NewReader(nil), -1, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readClaimed(tc.r, tc.size)
			switch {
			case tc.want == nil && err == nil:
				t.Fatalf("readClaimed = %d bytes, want an error", len(got))
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("readClaimed: %v, want %v", err, tc.err)
			case tc.want != nil && (err != nil || !bytes.Equal(got, tc.want)):
				t.Fatalf("readClaimed = %d bytes, %v; want %d bytes", len(got), err, len(tc.want))
			case tc.want != nil && cap(got) > 2*len(tc.want)+claimChunk:
				t.Fatalf("capacity %d for %d bytes", cap(got), len(got))
			}
		})
	}
}

// restoreRecorder is a cluster whose only call is Restore: it records the data.
type restoreRecorder struct {
	Cluster
	mu   sync.Mutex
	data [][]byte
}

func (r *restoreRecorder) Restore(_ context.Context, data []byte, _ uint64) (raftnode.Restored, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = append(r.data, data)
	return raftnode.Restored{}, nil
}

// Issue 11: the admin channel allocated the announced size (up to 1 GiB) before reading a
// byte. A peer that announces 1 GiB and sends 10 bytes now costs the first chunk; a real
// restore next to it goes through.
func TestChannelRestoreAllocatesWhatArrives(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &restoreRecorder{}
	go ServeChannel(ln, rec, hclog.NewNullLogger())
	t.Cleanup(func() { ln.Close() })
	addr := ln.Addr().String()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var liars []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		line, _ := json.Marshal(ChannelRequest{Op: "restore", Size: MaxSnapshot})
		if _, err := c.Write(append(append(line, '\n'), "ten bytes."...)); err != nil {
			t.Fatal(err)
		}
		liars = append(liars, c)
	}
	// A real restore while the four wait for their gigabyte.
	backup := bytes.Repeat([]byte("backup"), 200_000)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := CallRestore(ctx, conn, backup, 0); err != nil {
		t.Fatalf("restore next to the liars: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the liars' lines are read by now: what they cost is spent
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("4 connections announcing %d MiB each and one real restore of %d KB allocated %d KiB in all; %s",
		MaxSnapshot>>20, len(backup)/1000, allocated>>10, clustertest.MemReport())
	if allocated > 32<<20 {
		t.Fatalf("allocated %d MiB: the announced size was trusted", allocated>>20)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.data) != 1 || !bytes.Equal(rec.data[0], backup) {
		t.Fatalf("restores %d; want exactly the real one", len(rec.data))
	}
	for _, c := range liars { // still waiting: nothing answered them
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if b, err := bufio.NewReader(c).ReadByte(); err == nil {
			t.Fatalf("a liar got an answer (%q...)", b)
		}
	}
}
