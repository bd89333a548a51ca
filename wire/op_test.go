package wire

import "testing"

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{
		OpAcquire: "A", OpRelease: "R", OpPing: "P", OpHello: "H", OpProof: "V",
		OpTimeout: "T", OpBusy: "B", OpNotHeld: "N", OpError: "E",
		'x': "Op(0x78)", 0: "Op(0x00)", '\n': "Op(0x0a)",
	} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", byte(op), got, want)
		}
	}
}

// TestLayoutsMatchProtocol pins the header lengths of sections 3.1 and 3.2.
func TestLayoutsMatchProtocol(t *testing.T) {
	req := map[Op]int{OpAcquire: 11, OpRelease: 16, OpPing: 8, OpHello: 34, OpProof: 32}
	resp := map[Op]int{OpAcquire: 16, OpTimeout: 8, OpBusy: 8, OpRelease: 8, OpNotHeld: 8, OpPing: 8, OpError: 8, OpHello: 34, OpProof: 32}
	for b := range 256 {
		op := Op(b)
		if got := int(requestLayouts[b].hdr); got != req[op] {
			t.Errorf("request %v header = %d, want %d", op, got, req[op])
		}
		if got := int(responseLayouts[b].hdr); got != resp[op] {
			t.Errorf("response %v header = %d, want %d", op, got, resp[op])
		}
	}
}
