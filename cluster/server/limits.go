package server

import (
	"fmt"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// Descriptors is how a server process shares its open-files limit (RLIMIT_NOFILE): what
// it keeps for itself (listeners, the data dir, peers, standard streams), for the HTTP
// port's connection cap, for connections being refused, and what is left for clients.
type Descriptors struct {
	Limit    uint64 // the soft limit, after raising it to the hard one
	Base     int    // kept for the process: listeners, data dir, peers, the spare
	HTTP     int    // the HTTP port's connection cap
	Refusing int    // client connections being answered E unavailable at once (Config.MaxRefusing)
	MaxConns int    // what is left for client connections
}

// Shares of the descriptors that are not client connections. Single mode keeps a few for
// itself; cluster mode more: Raft's connection pool to each peer, forwarding, the admin
// channel, the WAL segments and snapshots of the data dir.
const (
	baseSingle  = 32
	baseCluster = 128
	maxHTTPCap  = 256 // admin.DefaultHTTPConfig's cap
	maxRefusing = 32
	minClients  = 16
)

// RaiseOpenFiles raises the process's soft open-files limit to its hard limit and returns
// the soft limit before and after.
func RaiseOpenFiles() (before, after uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, fmt.Errorf("read the open-files limit: %w", err)
	}
	before = l.Cur
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return before, before, fmt.Errorf("raise the open-files limit from %d to its hard limit %d: %w", before, l.Max, err)
		}
	}
	return before, l.Cur, nil
}

// PlanDescriptors shares limit descriptors out for a server asked to serve want client
// connections (cluster: a cluster member). MaxConns is want if it fits, else what does;
// the error says why no plan fits at all.
func PlanDescriptors(limit uint64, want int, cluster bool) (Descriptors, error) {
	d := Descriptors{Limit: limit, Base: baseSingle}
	if cluster {
		d.Base = baseCluster
	}
	avail := int(min(limit, 1<<30)) - d.Base
	d.HTTP = min(maxHTTPCap, avail/4)
	d.Refusing = min(maxRefusing, avail/8)
	room := avail - d.HTTP - d.Refusing
	d.MaxConns = min(want, room)
	if room < min(want, minClients) {
		return d, fmt.Errorf("the open-files limit (%d) leaves room for %d client connections, fewer than %d: raise it "+
			"(ulimit -n, systemd LimitNOFILE, the container runtime's nofile) to at least %d", limit, max(room, 0), min(want, minClients),
			d.Needed(min(want, minClients)))
	}
	return d, nil
}

// Needed is the open-files limit that serving n client connections takes.
func (d Descriptors) Needed(n int) uint64 {
	return uint64(n + d.Base + maxHTTPCap + maxRefusing)
}

// FitDescriptors raises the open-files soft limit to the hard one (RaiseOpenFiles) and shares
// it out (PlanDescriptors) for want client connections (--max-conns; explicit: the user set
// it): an explicit want that does not fit is refused, naming the fixes; the default is
// lowered to fit, with a warning. log receives that warning and the plan (at debug).
func FitDescriptors(want int, explicit, cluster bool, log hclog.Logger) (Descriptors, error) {
	before, limit, err := RaiseOpenFiles()
	if err != nil {
		log.Warn("cannot raise the open-files limit; sharing out the current one", "error", err)
	}
	d, err := PlanDescriptors(limit, want, cluster)
	if err != nil {
		return d, fmt.Errorf("--max-conns %d: %w", want, err)
	}
	if d.MaxConns < want {
		if explicit {
			return d, fmt.Errorf("--max-conns %d does not fit the open-files limit %d: serving it takes about %d descriptors "+
				"(connections, HTTP, peers, data dir); raise the limit (ulimit -n, systemd LimitNOFILE, the container runtime's nofile) "+
				"or set --max-conns %d or lower", want, limit, d.Needed(want), d.MaxConns)
		}
		log.Warn("lowering --max-conns to fit the open-files limit; raise the limit (ulimit -n, LimitNOFILE) to serve more",
			"max_conns", d.MaxConns, "default", want, "open_files_limit", limit)
	}
	log.Debug("open-files limit shared out", "open_files_limit", limit, "raised_from", before, "max_conns", d.MaxConns,
		"http_conns", d.HTTP, "refusing", d.Refusing, "kept", d.Base)
	return d, nil
}
