// Package clusterstatus gathers what `canopy status` and the nodes' status
// page show: the cluster's nodes (address, liveness, membership, version,
// uptime, store size, replicas and leases) and its ranges (span, replicas,
// leaseholder, size, each follower's lag, and whether the range is
// under-replicated or unavailable).
//
// Contract: Gather asks through a client.DB, so the CLI (with the user's
// certificate) and a node (with its node certificate, for its status page)
// see the same report from the same RPCs: ClusterInfo and Members from any
// node, NodeStatus from every node, RangeLookup over the whole keyspace.
// A node that does not answer is reported unreachable, not an error; only
// a failure to reach the cluster at all is. Report.JSON is the one JSON
// form of a report (`canopy status -o json`, and the status page's
// /api/status).
package clusterstatus
