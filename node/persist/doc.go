// Package persist writes a node's durable counters to its data dir and
// reads them back: the counters whose idle deadline is an hour or more
// away (a daily or monthly quota), from the node's shards (as owner) and
// its replica store (as replica), so that a full-cluster stop loses at
// most what was admitted in the last interval.
//
// # Parts
//
//   - Encode and Decode (format.go): pure functions between a Snapshot
//     and the bytes of the file. The format is versioned (a magic and a
//     version number) and checksummed (CRC-32C over everything before
//     it); Decode rejects a file that is truncated, corrupt, of another
//     version or whose counts do not fit its length, with an error
//     wrapping ErrCorrupt or ErrVersion, and never panics (FuzzDecode).
//   - WriteFile and ReadFile (file.go): atomic replace (write a temporary
//     file in the same directory, fsync it, rename it over the old one,
//     fsync the directory), so a crash leaves the old file or the new
//     one, never half of one.
//   - Writer (writer.go): the one background goroutine (Run) that every
//     Interval collects a Snapshot through its Collect function and
//     writes it unless it holds the same counters as the last write.
//     Write collects and writes once more (the node's leave). Writes are
//     serialised by a mutex; nothing here is on a check's path.
//   - Keeper (keeper.go): the node's part that owns all of it: it loads
//     the file at start (into the replica store as copies, or a solo
//     node's straight into its shards), tells the cluster loop to hold
//     the first ring back until the members the file was written with are
//     back (Restoring), and collects what the Writer writes (the shards'
//     durable counters, the copies this node is placed to hold, the
//     ring's members). The node's shards, replica store and ring reach it
//     through small interfaces (Counters, Copies, Ring).
//
// The package knows no rule semantics and imports only the standard
// library, replication (State) and the seam (internal/sched).
package persist
