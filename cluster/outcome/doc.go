// Package outcome is the one vocabulary for what became of a command or an admin change
// that did not succeed. An outcome starts in cluster/raftnode (which classifies every raft
// error into one) or where a node refuses something itself, travels through package cluster,
// cluster/member and the admin channel between nodes unchanged, and ends as a wire reason
// (Reason), an HTTP status (HTTPStatus), a client error and an exit code. Each kind has the
// name of the wire reason it becomes wherever the meaning is the same:
//
//	kind           wire reason    client error      exit  HTTP status  admin exit
//	Unavailable    unavailable    ErrUnavailable    69    503          69
//	NotLeader      unavailable    ErrUnavailable    69    503          69
//	Indeterminate  indeterminate  ErrIndeterminate  76    504          76
//	Refused        internal       ServerError       69    400          65
//
// The kinds:
//
//   - Unavailable: definitely not applied, on any node, and never will be; nothing changed,
//     and the caller may retry, here or elsewhere.
//   - NotLeader: Unavailable (errors.Is says so too), because this node is not the
//     established leader: the command goes to the leader (cluster/member forwards admin
//     changes there; the lock protocol's follower forwards commands).
//   - Indeterminate: it reached the log, or may have, and its fate is unknown here: applied
//     already, later by another leader, or never. A blind retry could apply it twice.
//   - Refused: not applied, because the command itself cannot be carried out (bad input, a
//     new member that would halt on the log); retrying it unchanged fails the same way. It is
//     not Unavailable. On the lock protocol it is a bug (the node proposes only commands it
//     checked), so the wire says internal, which the client has no sentinel for (a
//     *client.ServerError).
//
// The columns, and where each mapping is written once: the wire reason is Reason (this
// package); the client error is the one client's reasonErrors gives that reason (package
// client); exit is the code of the lock verbs (latch acquire, release, run, extend: cmd/latch
// exitFor from the client error: 69 exitUnavailable, 76 exitIndeterminate); the HTTP status is
// HTTPStatus (this package), which the admin endpoints answer (cluster/admin adds the statuses
// of admin errors that are not outcomes: 404 no such member, 409 another node at that address
// or a lock not held by that token, 400 a bad backup); admin exit is the code of the admin
// verbs for that status (cmd/latch adminExit: 65 exitRefused). TestVocabulary here and
// cmd/latch's TestExitCodesFollowTheVocabulary read this table and check every column
// against the code.
//
// It imports only the standard library and package wire, so that every layer can use it;
// it must never grow a dependency on the packages that use it.
package outcome
