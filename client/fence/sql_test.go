package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The statements are exercised on real databases in the fencetest module; here, what is
// refused before anything is sent.
func TestTableRefusesBeforeSending(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"fence; DROP TABLE x", "a.b.c", "1fence", "fe nce", "\"fence\""} {
		if _, err := (Table{Dialect: PostgreSQL, Name: name}).Statements(); err == nil || !strings.Contains(err.Error(), "table name") {
			t.Errorf("table name %q: %v, want refused", name, err)
		}
	}
	if _, err := (Table{}).Statements(); err == nil || !strings.Contains(err.Error(), "fence.PostgreSQL") {
		t.Errorf("no dialect: %v, want an error naming the dialects", err)
	}
	tb := Table{Dialect: SQLite}
	// A nil transaction: these must fail before using it.
	if err := tb.Check(ctx, nil, "r", 0); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("token 0: %v", err)
	}
	if err := tb.Check(ctx, nil, "r", MaxToken+1); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("token 2^63: %v", err)
	}
	for _, r := range []string{"", strings.Repeat("x", MaxResource+1)} {
		if err := tb.Check(ctx, nil, r, 5); err == nil || !strings.Contains(err.Error(), "resource name") {
			t.Errorf("resource of %d bytes: %v, want refused", len(r), err)
		}
	}
}

func TestStatements(t *testing.T) {
	st, err := Table{Dialect: PostgreSQL, Name: "app.fences"}.Statements()
	if err != nil {
		t.Fatal(err)
	}
	want := "INSERT INTO app.fences (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE fences.token <= excluded.token"
	if st.Check != want {
		t.Errorf("check:\n got %s\nwant %s", st.Check, want)
	}
	my, _ := Table{Dialect: MySQL}.Statements()
	if !strings.Contains(my.Create, "VARBINARY(255)") || !strings.HasSuffix(my.Read, "FOR UPDATE") || strings.Count(my.Check, "?") != 3 {
		t.Errorf("mysql statements: %+v", my)
	}
}
