package kvserver

import (
	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// twoPCServerProtocol is the server side of 2pc-locking
// (docs/design-notes.md, "The 2PC + locking baseline"): locking reads and
// Prepare, served by batch like any request (twopc_path.go).
type twoPCServerProtocol struct{}

func (twoPCServerProtocol) admit(sent commitprotocol.Name, ru *rpcpb.RequestUnion) bool {
	switch sent {
	case commitprotocol.TwoPCLocking:
		switch v := ru.GetValue().(type) {
		case *rpcpb.RequestUnion_Prepare:
			return true
		case *rpcpb.RequestUnion_Get:
			return v.Get.GetLock() && v.Get.GetTs() == 0
		case *rpcpb.RequestUnion_Scan, *rpcpb.RequestUnion_Refresh:
			// Scans read the snapshot and are refreshed to commit_ts
			// (keys are locked, not spans).
			return true
		}
		return false
	case commitprotocol.Default:
		// A read-only transaction of the default protocol reads a
		// snapshot: safe (commitprotocol, contract 3).
		return isSnapshotRead(ru)
	}
	return false
}

func (twoPCServerProtocol) start(*Node) error { return nil }
func (twoPCServerProtocol) stop()             {}
