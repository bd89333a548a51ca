package wire

import "encoding/binary"

// AppendRequest appends the frame for r to b and returns the extended slice.
// It does not allocate when b has room for the frame (MaxFrame bytes always
// suffice for a valid request).
//
// AppendRequest writes what it is given: check the request first (Check, and
// CheckClientKey for keys), since a key containing LF corrupts the stream,
// and send L (OpExtend) only on a connection with FlagLeases. It panics if
// r.Op is not a request op.
func AppendRequest(b []byte, r *Request) []byte {
	b = append(b, byte(r.Op))
	switch r.Op {
	case OpAcquire:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
		b = append(b, r.Wait)
		b = binary.BigEndian.AppendUint16(b, r.Lease)
		b = append(b, r.Key...)
	case OpRelease:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
		b = binary.BigEndian.AppendUint64(b, r.Token)
		b = append(b, r.Key...)
	case OpPing:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
	case OpExtend:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
		b = binary.BigEndian.AppendUint64(b, r.Token)
		b = binary.BigEndian.AppendUint16(b, r.Lease)
		b = append(b, r.Key...)
	case OpHello:
		b = appendHello(b, &r.Hello)
	case OpProof:
		b = append(b, r.Proof[:]...)
	default:
		panic("wire: AppendRequest: " + r.Op.String() + " is not a request op")
	}
	return append(b, '\n')
}

// AppendResponse appends the frame for r to b and returns the extended slice.
// It does not allocate when b has room for the frame (MaxFrame bytes always
// suffice for a valid response).
//
// AppendResponse writes what it is given: r.Reason must satisfy validReason,
// and on a connection with FlagLeases a grant is G (OpGranted), never A, while
// G, L (OpExtend) and ReasonUnsupported appear on no other connection. It
// panics if r.Op is not a response op.
func AppendResponse(b []byte, r *Response) []byte {
	b = append(b, byte(r.Op))
	switch r.Op {
	case OpAcquire:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
		b = binary.BigEndian.AppendUint64(b, r.Token)
	case OpGranted:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
		b = binary.BigEndian.AppendUint64(b, r.Token)
		b = binary.BigEndian.AppendUint32(b, r.Age)
	case OpTimeout, OpBusy, OpRelease, OpNotHeld, OpPing, OpExtend:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
	case OpError:
		b = binary.BigEndian.AppendUint64(b, r.Owner)
		b = append(b, r.Reason...)
	case OpHello:
		b = appendHello(b, &r.Hello)
	case OpProof:
		b = append(b, r.Proof[:]...)
	default:
		panic("wire: AppendResponse: " + r.Op.String() + " is not a response op")
	}
	return append(b, '\n')
}

func appendHello(b []byte, h *Hello) []byte {
	b = append(b, h.Version, h.Flags)
	return append(b, h.Nonce[:]...)
}
