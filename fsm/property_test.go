package fsm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// model is the obviously-correct reference the Table is checked against.
type model struct {
	held     map[string]Holder
	last     Token
	features Features
}

func (m *model) enable(f Features) (Features, bool) {
	if f == 0 || f&^KnownFeatures != 0 {
		return m.features, false
	}
	m.features |= f
	return m.features, true
}

func (m *model) acquire(key string, lease uint16) (Token, error) {
	if m.last == MaxToken {
		return 0, ErrTokenExhausted
	}
	if h, ok := m.held[key]; ok {
		return h.Token, ErrHeld
	}
	m.last++
	m.held[key] = Holder{Token: m.last, Lease: lease}
	return m.last, nil
}

func (m *model) release(key string, tok Token) bool {
	if h, ok := m.held[key]; ok && tok != 0 && h.Token == tok {
		delete(m.held, key)
		return true
	}
	return false
}

func (m *model) expire(key string, tok Token, ext uint32) bool {
	if h, ok := m.held[key]; ok && h.Extensions == ext {
		return m.release(key, tok)
	}
	return false
}

func (m *model) extend(key string, tok Token, lease uint16) (Holder, error) {
	h, ok := m.held[key]
	switch {
	case !ok || tok == 0 || h.Token != tok:
		return h, ErrNotHeld
	case h.Extensions == MaxExtensions:
		return h, ErrExtendLimit
	}
	h.Lease = lease
	h.Extensions++
	m.held[key] = h
	return h, nil
}

// TestTableMatchesModel applies random operation sequences to a Table and to
// the model and compares every result and the whole state after each step.
func TestTableMatchesModel(t *testing.T) {
	floors := []Token{0, 1000, MaxToken - 40, MaxToken - 3, MaxToken}
	for run := range 40 {
		floor := floors[run%len(floors)]
		t.Run(fmt.Sprintf("run%d_floor%d", run, floor), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(run), 0x6c61746368))
			tb := newTable(t, floor)
			m := &model{held: map[string]Holder{}, last: floor}
			keys := 1 + rng.IntN(12)
			for step := range 2000 {
				key := fmt.Sprintf("k%d", rng.IntN(keys))
				// A token that is often right, sometimes stale, 0 or absurd.
				tok := Token(0)
				switch rng.IntN(4) {
				case 0, 1:
					tok = m.held[key].Token
				case 2:
					if m.last > floor {
						tok = floor + 1 + Token(rng.Uint64N(uint64(m.last-floor)))
					}
				case 3:
					tok = Token(rng.Uint64())
				}
				// An extension count that is often right, sometimes stale.
				ext := m.held[key].Extensions
				switch rng.IntN(6) {
				case 0:
					ext++
				case 1:
					ext--
				case 2:
					ext = rng.Uint32()
				}
				var what string
				switch op := rng.IntN(13); {
				case op < 5:
					lease := uint16(1 + rng.IntN(3600))
					what = fmt.Sprintf("Acquire(%s, %d)", key, lease)
					wantTok, wantErr := m.acquire(key, lease)
					gotTok, gotKey, gotErr := tb.Acquire([]byte(key), lease)
					if gotTok != wantTok || !errors.Is(gotErr, wantErr) || (gotErr == nil) != (wantErr == nil) {
						t.Fatalf("step %d %s = %d, %v; model %d, %v", step, what, gotTok, gotErr, wantTok, wantErr)
					}
					if (gotErr == nil && gotKey != key) || (gotErr != nil && gotKey != "") {
						t.Fatalf("step %d %s returned key %q", step, what, gotKey)
					}
				case op < 7:
					what = fmt.Sprintf("Release(%s, %d)", key, tok)
					if got, want := tb.Release([]byte(key), tok), m.release(key, tok); got != want {
						t.Fatalf("step %d %s = %v, model %v", step, what, got, want)
					}
				case op < 9:
					what = fmt.Sprintf("Expire(%s, %d, %d)", key, tok, ext)
					if got, want := expire(tb, key, tok, ext), m.expire(key, tok, ext); got != want {
						t.Fatalf("step %d %s = %v, model %v", step, what, got, want)
					}
				case op < 11:
					lease := uint16(1 + rng.IntN(3600))
					what = fmt.Sprintf("Extend(%s, %d, %d)", key, tok, lease)
					wantH, wantErr := m.extend(key, tok, lease)
					gotH, gotKey, gotErr := tb.Extend([]byte(key), tok, lease)
					if gotH != wantH || !errors.Is(gotErr, wantErr) || (gotErr == nil) != (wantErr == nil) {
						t.Fatalf("step %d %s = %+v, %v; model %+v, %v", step, what, gotH, gotErr, wantH, wantErr)
					}
					if (gotErr == nil && gotKey != key) || (gotErr != nil && gotKey != "") {
						t.Fatalf("step %d %s returned key %q", step, what, gotKey)
					}
				case op == 12:
					f := Features(1) << rng.IntN(3) // leases, or a bit this latch does not know
					if rng.IntN(5) == 0 {
						f = 0
					}
					what = fmt.Sprintf("ApplyCommand(enable %v)", f)
					want, ok := m.enable(f)
					got := tb.ApplyCommand(Command{Kind: CmdEnable, Features: f})
					if (got.Kind == Enabled) != ok || (ok && got.Features != want) || (!ok && got != (Result{Kind: Invalid})) {
						t.Fatalf("step %d %s = %+v; model %v, %v", step, what, got, want, ok)
					}
				default:
					what = fmt.Sprintf("Holder(%s)", key)
					got, gotOK := tb.Holder([]byte(key))
					want, wantOK := m.held[key]
					if got != want || gotOK != wantOK {
						t.Fatalf("step %d %s = %+v, %v; model %+v, %v", step, what, got, gotOK, want, wantOK)
					}
				}
				if tb.Len() != len(m.held) || tb.LastToken() != m.last || tb.Exhausted() != (m.last == MaxToken) || tb.Features() != m.features {
					t.Fatalf("step %d after %s: Len %d LastToken %d Exhausted %v Features %v; model %d %d %v",
						step, what, tb.Len(), tb.LastToken(), tb.Exhausted(), tb.Features(), len(m.held), m.last, m.features)
				}
				if !equalState(snapshot(tb), m.held) {
					t.Fatalf("step %d after %s: table %v, model %v", step, what, snapshot(tb), m.held)
				}
			}
		})
	}
}
