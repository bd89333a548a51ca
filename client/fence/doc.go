// Package fence is the resource side of latch's fencing tokens: the check that stops a
// holder whose lease ran out while it was paused (a GC pause, a stopped VM, a slow disk)
// from writing over the work of the holder after it.
//
// # The rule
//
// A resource accepts a write carrying token T only if T is at least the highest token it
// has accepted, and it records T in the same atomic step as the write.
//
// latch's tokens grow across all grants of all keys, and no two holders ever get the same
// token, so an equal token is the same holder writing again and is accepted; a lower one
// belongs to a holder that a newer one has replaced, and is refused with a *StaleError
// (errors.Is(err, ErrStale)). The holder must then stop, not retry. Tokens are 1..2^63-1
// (MaxToken), so they fit a signed BIGINT; anything else is ErrInvalidToken.
//
// Three pieces apply the rule, one per kind of resource:
//
//   - Table, for a SQL database through database/sql: a fence table of (resource, token)
//     rows, checked and updated inside the caller's transaction, so the write and the new
//     mark commit together (PostgreSQL, SQLite, MySQL).
//   - Guard, for a resource inside one process: per-resource marks in memory, safe for
//     concurrent use, with bounded memory.
//   - Guard.Middleware, for an HTTP service: the token comes in the Latch-Token header, and
//     a stale one is answered 409 with the token the resource has seen.
//
// docs/fencing.md explains why, gives the SQL for each database, covers object stores and
// files, and shows `latch run` passing LATCH_TOKEN to a shell script that writes through
// psql.
//
// The package imports only the standard library; the database drivers are the caller's.
//
// # Example
//
// A job holds jobs/nightly-report and writes the report in PostgreSQL; the fence table
// and the report table are in the same database:
//
//	var fences = fence.Table{Dialect: fence.PostgreSQL}
//
//	func writeReport(ctx context.Context, db *sql.DB, t *client.Ticket, body string) error {
//		tx, err := db.BeginTx(ctx, nil)
//		if err != nil {
//			return err
//		}
//		defer tx.Rollback() // a no-op after Commit; a rollback leaves the mark as it was
//		if err := fences.Check(ctx, tx, "reports/nightly", t.Token); err != nil {
//			return err // errors.Is(err, fence.ErrStale): a newer holder wrote; stop
//		}
//		if _, err := tx.ExecContext(ctx, "UPDATE reports SET body = $1 WHERE name = 'nightly'", body); err != nil {
//			return err
//		}
//		return tx.Commit()
//	}
//
// with the table made once by fences.Create(ctx, db). The caller of writeReport acquires
// the lock with the official client (client.Client.Acquire) and derives ctx from
// t.Context(), so the work also stops at the ticket's deadline; the fence is what stops it
// when that deadline was missed.
package fence
