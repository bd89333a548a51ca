package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/latchd/latch/client/fence"
)

// A process that owns a resource guards its writes in memory.
func ExampleGuard() {
	g := fence.NewGuard(0)
	write := func(token uint64, text string) {
		err := g.Do("reports/nightly", token, func() error {
			fmt.Println("wrote", text)
			return nil
		})
		if errors.Is(err, fence.ErrStale) {
			fmt.Println(err)
		}
	}
	write(41, "by the first holder")
	write(42, "by the second holder")
	write(41, "late, by the first holder") // paused past its lease: refused
	// Output:
	// wrote by the first holder
	// wrote by the second holder
	// fence: token 41 for resource "reports/nightly" is stale: token 42 has been accepted; a newer holder exists, stop
}

// The check runs in the writer's transaction, before the write; both commit together.
func ExampleTable() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // any database/sql driver
	if err != nil {
		return
	}
	fences := fence.Table{Dialect: fence.PostgreSQL}
	ctx := context.Background()
	if err := fences.Create(ctx, db); err != nil {
		return
	}
	token, err := fence.ParseToken(os.Getenv("LATCH_TOKEN")) // as `latch run` passes it
	if err != nil {
		return
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return
	}
	defer tx.Rollback()
	if err := fences.Check(ctx, tx, "reports/nightly", token); errors.Is(err, fence.ErrStale) {
		fmt.Println("a newer holder has written the report; stopping:", err)
		return
	} else if err != nil {
		return
	}
	if _, err := tx.ExecContext(ctx, "UPDATE reports SET body = $1 WHERE name = 'nightly'", "..."); err != nil {
		return
	}
	tx.Commit()
}

// An HTTP service refuses stale writers with 409; the writer sends its token in the
// Latch-Token header.
func ExampleGuard_Middleware() {
	g := fence.NewGuard(0)
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... write r.Body to the object named by r.URL.Path
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("PUT /objects/", g.Middleware(nil, store)) // one mark per path
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
