package fsm

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// batch256 returns one entry of 128 acquire/release pairs over distinct
// keys, and the offsets of the release tokens in it.
func batch256(tb testing.TB) (data []byte, tokenAt []int) {
	tb.Helper()
	cmds := make([]Command, 0, 256)
	for i := range 128 {
		k := appendKey(nil, i)
		cmds = append(cmds, Command{Kind: CmdAcquire, Key: k, Lease: 30}, Command{Kind: CmdRelease, Key: k})
	}
	data, err := AppendBatch(nil, cmds)
	if err != nil {
		tb.Fatal(err)
	}
	off := batchHeaderLen
	for _, c := range cmds {
		off += 2 + len(c.Key)
		if c.Kind == CmdAcquire {
			off += 2
		} else {
			tokenAt = append(tokenAt, off)
			off += 8
		}
	}
	return data, tokenAt
}

// BenchmarkApplyBatch256 applies entries of 256 commands (128 grants, 128
// releases) through FSM.ApplyBatch, as raft does. Each iteration patches the
// 128 release tokens in place (a few ns) so every release matches.
func BenchmarkApplyBatch256(b *testing.B) {
	f := newFSM(b, 0)
	data, tokenAt := batch256(b)
	logs := []*raft.Log{{Type: raft.LogCommand, Data: data}}
	var last Token
	b.ReportAllocs()
	for b.Loop() {
		for i, off := range tokenAt {
			binary.BigEndian.PutUint64(data[off:], uint64(last)+uint64(i)+1)
		}
		logs[0].Index++
		res := f.ApplyBatch(logs)[0].([]Result)
		if res[255].Kind != Released {
			b.Fatalf("last result %v", res[255].Kind)
		}
		last += 128
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*256), "ns/cmd")
}

func BenchmarkDecodeBatch256(b *testing.B) {
	data, _ := batch256(b)
	dst := make([]Command, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeBatch(data, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendBatch256(b *testing.B) {
	data, _ := batch256(b)
	cmds, _ := DecodeBatch(data, nil)
	buf := make([]byte, 0, len(data))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		buf, _ = AppendBatch(buf[:0], cmds)
	}
}

const benchKeys = 1_000_000

// BenchmarkSnapshot1M is FSM.Snapshot alone on 1,000,000 keys: the part
// that blocks Apply.
func BenchmarkSnapshot1M(b *testing.B) {
	f := newFSM(b, 0)
	fillFSM(b, f, benchKeys)
	b.ReportAllocs()
	for b.Loop() {
		s, _ := f.Snapshot()
		s.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/snapshot")
}

// BenchmarkSnapshotPersist1M is Snapshot plus Persist (sort, encode,
// checksum) of 1,000,000 keys into a sink that discards.
func BenchmarkSnapshotPersist1M(b *testing.B) {
	f := newFSM(b, 0)
	fillFSM(b, f, benchKeys)
	var size int64
	b.ReportAllocs()
	for b.Loop() {
		s, _ := f.Snapshot()
		sink := &countSink{}
		if err := s.Persist(sink); err != nil {
			b.Fatal(err)
		}
		s.Release()
		size = sink.n
	}
	b.ReportMetric(float64(size), "snapshot-B")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
}

// BenchmarkRestore1M is FSM.Restore of a 1,000,000-key snapshot.
func BenchmarkRestore1M(b *testing.B) {
	f := newFSM(b, 0)
	fillFSM(b, f, benchKeys)
	data := persist(b, f)
	g := newFSM(b, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
}

type countSink struct{ n int64 }

func (s *countSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *countSink) Close() error                { return nil }
func (s *countSink) Cancel() error               { return nil }
func (s *countSink) ID() string                  { return "count" }
