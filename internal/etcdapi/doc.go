// Package etcdapi serves etcd's v3 gRPC API (go.etcd.io/etcd/api/v3) over
// a Canopy cluster, so that etcdctl and programs written with etcd's
// clientv3 run against Canopy unchanged. Every node serves it on its gRPC
// port (kvserver/etcd.go), under the node's TLS and authorization
// (security.MethodLevels).
//
// # Services
//
//   - KV: Range (limit, sort, keys-only, count-only, revision filters, a
//     past revision), Put (prev_kv, lease, ignore_value, ignore_lease),
//     DeleteRange (prev_kv), Txn (compares on value, version,
//     create_revision, mod_revision and lease, over a key or a range;
//     nested Txns), Compact.
//   - Watch: start revision, prev_kv, NOPUT/NODELETE filters, progress
//     notifications (requested, or every Options.ProgressInterval with
//     progress_notify), cancel, several watches per stream.
//   - Lease: Grant, Revoke, KeepAlive, TimeToLive (with keys), Leases.
//   - Cluster: MemberList. Maintenance: Status. The other methods of
//     these two services answer Unimplemented.
//
// # Contract
//
//  1. One etcd request is one Canopy transaction (client.DB.Txn,
//     serializable): a Txn's compares and operations are atomic and
//     isolated together, and retried by the client library on conflicts
//     before anything is acknowledged. Its writes are handed to the
//     commit (buffer.go): one Raft proposal when they fall in one range.
//  2. A revision is a Canopy commit timestamp: the revision of a request
//     that writes is its transaction's commit timestamp, that of a
//     request that only reads its start timestamp. Revisions are unique
//     per transaction and increase, but are not consecutive (they are
//     large: milliseconds << 18 plus a logical counter).
//  3. mod_revision is the commit timestamp of the version read (Canopy
//     stores it with every version); version, create_revision and the
//     lease are kept in an envelope before the value (keys.go). All etcd
//     data lives under Prefix in Canopy's user keyspace.
//  4. Watches deliver every change of their range once, in revision
//     order, all the changes of one revision in one response, also
//     across leaseholder changes, splits and node restarts (client.DB.Watch
//     resumes; this package orders by the resolved timestamps).
//  5. Leases expire by the oracle's clock (the physical part of Canopy
//     timestamps), with LeaseGraceMs of grace; every node revokes expired
//     leases, deleting their keys
//     in the revocation's transaction.
//  6. Limits: KeyBytesMax, Canopy's value limit (keys.ValueBytesMax less
//     the envelope), Options.TxnOpsMax, RangeKeysMax, WatchersPerStreamMax,
//     WatchEventsBufferedMax; exceeding one is InvalidArgument naming it.
//
// docs/ETCD-API.md lists every difference from etcd's semantics.
package etcdapi
