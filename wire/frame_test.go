package wire

import "testing"

func TestRequestCheck(t *testing.T) {
	good := []byte("k")
	bad := []byte("a b")
	tests := []struct {
		name string
		r    Request
		want Reason
	}{
		{"acquire ok", Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: good}, ""},
		{"acquire owner 0 + bad key + bad lease", Request{Op: OpAcquire, Owner: 0, Lease: 0, Key: bad}, ReasonBadOwner},
		{"acquire owner 0 + bad lease", Request{Op: OpAcquire, Owner: 0, Lease: 3601, Key: good}, ReasonBadOwner},
		{"acquire bad key + bad lease", Request{Op: OpAcquire, Owner: 1, Lease: 0, Key: bad}, ReasonBadKey},
		{"acquire no key + bad lease", Request{Op: OpAcquire, Owner: 1, Lease: 65535}, ReasonBadKey},
		{"acquire lease 0", Request{Op: OpAcquire, Owner: 1, Lease: 0, Key: good}, ReasonBadRange},
		{"acquire lease 1", Request{Op: OpAcquire, Owner: 1, Lease: 1, Key: good}, ""},
		{"acquire lease 3600", Request{Op: OpAcquire, Owner: 1, Lease: 3600, Key: good}, ""},
		{"acquire lease 3601", Request{Op: OpAcquire, Owner: 1, Lease: 3601, Key: good}, ReasonBadRange},
		{"acquire wait 255", Request{Op: OpAcquire, Owner: 1, Wait: 255, Lease: 1, Key: good}, ""},
		{"release ok, token 0", Request{Op: OpRelease, Owner: 1, Key: good}, ""},
		{"release owner 0 + bad key", Request{Op: OpRelease, Key: bad}, ReasonBadOwner},
		{"release bad key", Request{Op: OpRelease, Owner: 1, Key: bad}, ReasonBadKey},
		{"release ignores lease", Request{Op: OpRelease, Owner: 1, Lease: 0, Key: good}, ""},
		{"ping ok", Request{Op: OpPing, Owner: 1}, ""},
		{"ping owner 0", Request{Op: OpPing}, ReasonBadOwner},
		{"ping ignores key and lease", Request{Op: OpPing, Owner: 1, Key: bad}, ""},
		{"hello", Request{Op: OpHello}, ""},
		{"proof", Request{Op: OpProof}, ""},
		{"not a request op", Request{Op: OpError, Owner: 1}, ReasonBadRequest},
		{"zero request", Request{}, ReasonBadRequest},
	}
	for _, tc := range tests {
		if got := tc.r.Check(); got != tc.want {
			t.Errorf("%s: Check() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
