package kvserver

import (
	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// The server side of the commit protocols (internal/commitprotocol states
// the contract both sides keep).
//
// A node learns its cluster's protocol with the other cluster settings
// (at init, when it joins, or from its store at restart) and serves a
// transactional request only if that protocol admits it: batch refuses
// the others with PROTOCOL_NOT_RUN before anything is latched or
// evaluated. Requests outside transactions belong to no protocol.
//
// Each protocol is a serverProtocol in serverProtocols. Adding one:
//
//  1. write its serverProtocol (admit, and start/stop for background
//     machinery such as validators) and put it in serverProtocols;
//  2. its own RPC services, if any, are registered at node start for
//     every cluster (the protocol is not known before init), and each of
//     their handlers refuses with PROTOCOL_NOT_RUN unless
//     n.commitProtocol() is its protocol;
//  3. mark it built in commitprotocol (then init accepts it) once the
//     client side exists too.
//
// The hierarchy protocols' server side is hierarchyServerProtocol
// (hierarchy.go); their validators are started by hierManage.

// serverProtocol is what a commit protocol does at a node.
type serverProtocol interface {
	// admit reports whether a node of a cluster running this protocol
	// serves ru, a transactional request sent by a transaction of
	// protocol sent. It is called for every transactional request of
	// every batch, so it must be cheap and must not block.
	admit(sent commitprotocol.Name, ru *rpcpb.RequestUnion) bool
	// start is called once, when the node knows that its cluster runs
	// this protocol and its replicas exist (after Start or after join);
	// stop when the node stops. Neither may block for long.
	start(n *Node) error
	stop()
}

// serverProtocols maps every protocol to its server side; nil marks a slot
// not built yet.
var serverProtocols = map[commitprotocol.Name]func() serverProtocol{
	commitprotocol.Default:             func() serverProtocol { return defaultServerProtocol{} },
	commitprotocol.TwoPCLocking:        func() serverProtocol { return twoPCServerProtocol{} },
	commitprotocol.HierarchyLocking:    func() serverProtocol { return hierarchyServerProtocol{} }, // hierarchy.go
	commitprotocol.HierarchyTimestamps: func() serverProtocol { return hierarchyServerProtocol{} },
}

// newServerProtocol returns the server side of the protocol settings name,
// nil for a slot not built (or a name this build does not know).
func newServerProtocol(s *rpcpb.ClusterSettings) serverProtocol {
	if mk := serverProtocols[commitprotocol.Of(s.GetCommitProtocol())]; mk != nil {
		return mk()
	}
	return nil
}

// serverProtocol returns the node's protocol implementation (nil before
// init, or for a protocol not built).
func (n *Node) serverProtocol() serverProtocol {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.protocol
}

// startProtocol starts the cluster's protocol once (after Start found the
// node bootstrapped, or after join).
func (n *Node) startProtocol() {
	n.protocolStart.Do(func() {
		if p := n.serverProtocol(); p != nil {
			if err := p.start(n); err != nil {
				n.log.Error("starting the commit protocol", "protocol", n.commitProtocol(), "err", err)
			}
		}
	})
}

// stopProtocol stops what startProtocol started.
func (n *Node) stopProtocol() {
	n.protocolStart.Do(func() {}) // no start after this
	if p := n.serverProtocol(); p != nil {
		p.stop()
	}
}

// commitProtocol returns the cluster's protocol (Default before init).
func (n *Node) commitProtocol() commitprotocol.Name {
	return commitprotocol.Of(n.settings().GetCommitProtocol())
}

// isTransactional reports whether ru belongs to a transaction (and so to
// a protocol). Non-transactional reads and writes, plain requests (status
// and heartbeat records, system keys) and intent resolution belong to
// none: every protocol's readers resolve every protocol's intents.
func isTransactional(ru *rpcpb.RequestUnion) bool {
	switch v := ru.GetValue().(type) {
	case *rpcpb.RequestUnion_Get:
		return v.Get.GetTxnStart() != 0
	case *rpcpb.RequestUnion_Scan:
		return v.Scan.GetTxnStart() != 0
	case *rpcpb.RequestUnion_PutIntent, *rpcpb.RequestUnion_Refresh, *rpcpb.RequestUnion_QueryIntent,
		*rpcpb.RequestUnion_CommitOnePc, *rpcpb.RequestUnion_QueryOnePc, *rpcpb.RequestUnion_RecoverIntent,
		*rpcpb.RequestUnion_Prepare:
		return true
	}
	return false
}

// isSnapshotRead reports whether ru is a transactional read at a snapshot
// without a lock: what a Default read-only transaction sends.
func isSnapshotRead(ru *rpcpb.RequestUnion) bool {
	switch v := ru.GetValue().(type) {
	case *rpcpb.RequestUnion_Get:
		return !v.Get.GetLock() && v.Get.GetTs() != 0
	case *rpcpb.RequestUnion_Scan:
		return v.Scan.GetTs() != 0
	}
	return false
}

// admitBatch returns PROTOCOL_NOT_RUN if the cluster's protocol does not
// admit every transactional request of req, else nil.
func (n *Node) admitBatch(req *rpcpb.BatchRequest) *rpcpb.Error {
	cluster := n.commitProtocol()
	sent, err := commitprotocol.Parse(req.GetProtocol())
	if err != nil {
		return pbErr(rpcpb.ErrorCode_PROTOCOL_NOT_RUN, "%v", err)
	}
	impl := n.serverProtocol()
	for _, ru := range req.Requests {
		if !isTransactional(ru) {
			continue
		}
		if impl == nil {
			return pbErr(rpcpb.ErrorCode_PROTOCOL_NOT_RUN, "the cluster runs commit protocol %s, which this build does not implement", cluster)
		}
		if !impl.admit(sent, ru) {
			if sent != cluster {
				return pbErr(rpcpb.ErrorCode_PROTOCOL_NOT_RUN, "the cluster runs commit protocol %s; a %s request of a %s transaction is refused", cluster, ru.Method(), sent)
			}
			return pbErr(rpcpb.ErrorCode_PROTOCOL_NOT_RUN, "commit protocol %s does not use %s requests", cluster, ru.Method())
		}
	}
	return nil
}

// defaultServerProtocol: the default protocol serves every request but
// 2pc-locking's (Prepare, locking reads), and admits nothing of another
// protocol.
type defaultServerProtocol struct{}

func (defaultServerProtocol) admit(sent commitprotocol.Name, ru *rpcpb.RequestUnion) bool {
	if sent != commitprotocol.Default {
		return false
	}
	switch ru.GetValue().(type) {
	case *rpcpb.RequestUnion_Prepare:
		return false
	case *rpcpb.RequestUnion_Get:
		return !ru.GetGet().GetLock()
	}
	return true
}

func (defaultServerProtocol) start(*Node) error { return nil }
func (defaultServerProtocol) stop()             {}
