package wire

import (
	"testing"
	"time"
)

func TestStampWait(t *testing.T) {
	for _, c := range []struct {
		left time.Duration
		most uint8
		want uint8
		ok   bool
	}{
		{0, MaxWait, 0, false},
		{-time.Second, MaxWait, 0, false},
		{time.Nanosecond, MaxWait, 1, true},
		{time.Second, MaxWait, 1, true},
		{time.Second + time.Nanosecond, MaxWait, 2, true},
		{10 * time.Second, 5, 5, true}, // never more than the most allowed
		{time.Hour, MaxWait, MaxWait, true},
		{2500 * time.Millisecond, 10, 3, true},
	} {
		got, ok := StampWait(c.left, c.most)
		if got != c.want || ok != c.ok {
			t.Errorf("StampWait(%v, %d) = %d, %v; want %d, %v", c.left, c.most, got, ok, c.want, c.ok)
		}
	}
}

// Every (request, response) pair of section 3.2, both ways: the table a client and a
// forwarding node share.
func TestAnswers(t *testing.T) {
	want := map[Op][]Op{
		OpAcquire: {OpAcquire, OpTimeout, OpBusy, OpError},
		OpRelease: {OpRelease, OpNotHeld, OpError},
		OpPing:    {OpPing, OpError},
		OpHello:   nil,
		OpProof:   nil,
	}
	all := []Op{OpAcquire, OpRelease, OpPing, OpHello, OpProof, OpTimeout, OpBusy, OpNotHeld, OpError, Op('Z')}
	for req, ok := range want {
		for _, resp := range all {
			exp := false
			for _, o := range ok {
				exp = exp || o == resp
			}
			if got := Answers(req, resp); got != exp {
				t.Errorf("Answers(%v, %v) = %v, want %v", req, resp, got, exp)
			}
		}
	}
}
