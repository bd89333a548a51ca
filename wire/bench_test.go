package wire

import (
	"testing"
)

func benchDecode(b *testing.B, d *Decoder, f []byte, cut int) {
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		if cut > 0 {
			d.Decode(f[:cut])
		}
		if _, done, err := d.Decode(f[cut:]); !done || err != nil {
			b.Fatal("frame did not decode")
		}
	}
}

func BenchmarkDecodeAcquire(b *testing.B) {
	f := acq(1234, 5, 30, "orders/42")
	b.Run("whole", func(b *testing.B) { benchDecode(b, NewRequestDecoder(), f, 0) })
	b.Run("split", func(b *testing.B) { benchDecode(b, NewRequestDecoder(), f, len(f)/2) })
}

func BenchmarkDecodeRelease(b *testing.B) {
	f := rel(1234, 99, "orders/42")
	b.Run("whole", func(b *testing.B) { benchDecode(b, NewRequestDecoder(), f, 0) })
	b.Run("split", func(b *testing.B) { benchDecode(b, NewRequestDecoder(), f, len(f)/2) })
}

// BenchmarkDecodeReadBuffer decodes a full server read buffer of pipelined
// acquires, as the session read loop does.
func BenchmarkDecodeReadBuffer(b *testing.B) {
	f := acq(1234, 5, 30, "orders/42")
	var buf []byte
	for len(buf)+len(f) <= ReadBuffer {
		buf = append(buf, f...)
	}
	d := NewRequestDecoder()
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		for p := buf; len(p) > 0; {
			n, done, err := d.Decode(p)
			if !done || err != nil {
				b.Fatal("frame did not decode")
			}
			if d.Request().Check() != "" {
				b.Fatal("invalid request")
			}
			p = p[n:]
		}
	}
}

func BenchmarkDecodeResponses(b *testing.B) {
	fs := responseFrames()
	d := NewResponseDecoder()
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range fs {
			if _, done, err := d.Decode(f); !done || err != nil {
				b.Fatal("frame did not decode")
			}
		}
	}
}

func BenchmarkEncodeResponses(b *testing.B) {
	rs := sampleResponses()
	buf := make([]byte, 0, len(rs)*MaxFrame)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for i := range rs {
			buf = AppendResponse(buf, &rs[i])
		}
	}
}

func BenchmarkEncodeRequests(b *testing.B) {
	rs := sampleRequests()
	buf := make([]byte, 0, len(rs)*MaxFrame)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for i := range rs {
			buf = AppendRequest(buf, &rs[i])
		}
	}
}

func BenchmarkCheckKey(b *testing.B) {
	for name, k := range map[string]string{"ascii": "orders/42", "cyrillic128": cyrillic64} {
		kb := []byte(k)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if CheckKey(kb) != nil {
					b.Fatal("key refused")
				}
			}
		})
	}
}

func BenchmarkDecodeExtend(b *testing.B) {
	f := ext(1234, 99, 30, "orders/42")
	d := NewRequestDecoder()
	d.SetFlags(FlagLeases)
	b.Run("whole", func(b *testing.B) { benchDecode(b, d, f, 0) })
	b.Run("split", func(b *testing.B) { benchDecode(b, d, f, len(f)/2) })
}

// BenchmarkDecodeLeasesResponses decodes one frame of every response op of a revised
// connection.
func BenchmarkDecodeLeasesResponses(b *testing.B) {
	var fs [][]byte
	for _, r := range sampleLeasesResponses() {
		fs = append(fs, AppendResponse(nil, &r))
	}
	d := NewResponseDecoder()
	d.SetFlags(FlagLeases)
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range fs {
			if _, done, err := d.Decode(f); !done || err != nil {
				b.Fatal("frame did not decode")
			}
		}
	}
}
