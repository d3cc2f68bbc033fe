// Package backup writes a consistent copy of a cluster's user keyspace as
// of one timestamp to a directory, and loads such a copy into a new, empty
// cluster (`canopy backup`, `canopy restore`; issue 10 item 4).
//
// # What a backup holds
//
// Every user key's value as of the backup timestamp `at`, read page by page
// with client.DB.ScanAt(at): one consistent snapshot, since every page
// reads at the same timestamp and `at` was handed out by the oracle before
// the first page (docs/design-notes.md, "Reads, and why a read at a
// timestamp blocks no later write below it"). Intents met are resolved by
// their transaction's status, as any reader at `at` resolves them, so the
// backup holds committed values only.
//
// Rejected: copying the MVCC versions with their intents, plus the status
// records needed to interpret them (the record's "backup" use of range
// scans). A restore would then have to load versions at their original
// timestamps into a cluster whose oracle starts elsewhere, and carry over
// status records and their encoding. Resolving at `at` gives the same
// logical content, with neither problem; the status-table range scan
// (client.DB.ScanTxns) serves inspection instead. What is lost: history
// below `at` (a restored cluster starts with one version per key) and
// original commit timestamps.
//
// # Layout of a backup directory
//
//	MANIFEST          JSON (Manifest), then a line "sha256 <hex>" of the
//	                  JSON bytes; written last, atomically (temporary
//	                  file, fsync, rename, fsync of the directory), so a
//	                  backup without one is incomplete
//	data-NNNNNN.kv    data files, in key order: the magic "CANOPYBK", a
//	                  uint32 format version (1), then records
//	                  uvarint(len key) key uvarint(len value) value
//
// The manifest lists each data file's size, key count, first and last key
// and SHA-256. Restore checks the manifest's own checksum, then every data
// file (size, checksum, records that parse, keys strictly increasing
// across the whole backup, counts) before it writes anything, so a damaged
// backup is refused with ErrDamaged and the target cluster is untouched.
//
// # Contract for callers
//
//  1. Backup needs `at` to be an oracle timestamp already handed out
//     (DB.Timestamp); a later one could miss commits still to land at or
//     below it. It must finish within the cluster's GC TTL (default 10
//     minutes) after `at`: older versions may be collected, and a page
//     then fails with ErrInvalidArgument from the client.
//  2. Backup refuses a directory that exists and is not empty (ErrExists).
//  3. Restore refuses a cluster that holds any user key (ErrNotEmpty). A
//     restore that stops part-way leaves the keys it loaded: start again
//     on a new cluster.
//  4. Restored keys are written by transactions at the target cluster's
//     own timestamps; their values are the backup's.
package backup
