package kvserver

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"google.golang.org/protobuf/proto"
)

// StoreRange is what a store holds of one range, for inspection.
type StoreRange struct {
	RangeID     uint64
	Desc        *rpcpb.RangeDescriptor // nil: uninitialized
	Raft        replica.PersistedInfo
	GCThreshold uint64
	Plain       int // unversioned keys
	Intents     int
	Versions    int
}

// StoreInfo is what a store holds, for inspection.
type StoreInfo struct {
	NodeID    uint64
	ClusterID string
	Nodes     []*rpcpb.NodeDescriptor
	Ranges    []StoreRange
}

// InspectStore reads a stopped node's store: its identity and, for every
// range it holds, the descriptor, the Raft state and key counts.
func InspectStore(eng *storage.Engine) (StoreInfo, error) {
	var info StoreInfo
	v, err := eng.Get(nodeIdentKey)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return info, nil // not bootstrapped
	case err != nil:
		return info, err
	}
	var j rpcpb.JoinRequest
	if err := proto.Unmarshal(v, &j); err != nil {
		return info, fmt.Errorf("kvserver: node identity: %v: %w", err, storage.ErrCorruption)
	}
	info.NodeID, info.ClusterID, info.Nodes = j.NodeId, j.Settings.GetClusterId(), j.Nodes
	it, err := eng.NewIter(registryKey(0), registryKey(^uint64(0)))
	if err != nil {
		return info, err
	}
	var ids []uint64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		ids = append(ids, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	if err := it.Close(); err != nil {
		return info, err
	}
	for _, id := range ids {
		sr := StoreRange{RangeID: id}
		if sr.Desc, err = loadDesc(eng, id); err != nil {
			return info, err
		}
		if sr.Raft, err = replica.Inspect(eng, id); err != nil {
			return info, err
		}
		if sr.GCThreshold, err = loadGCThreshold(eng, id); err != nil {
			return info, err
		}
		if sr.Desc != nil {
			err = mvcc.IterateSpan(eng, sr.Desc.StartKey, sr.Desc.EndKey, func(pk, _ []byte) error {
				_, kind, _, err := mvcc.DecodeKey(pk)
				if err != nil {
					return err
				}
				switch kind {
				case mvcc.KindPlain:
					sr.Plain++
				case mvcc.KindIntent:
					sr.Intents++
				default:
					sr.Versions++
				}
				return nil
			})
			if err != nil {
				return info, err
			}
		}
		info.Ranges = append(info.Ranges, sr)
	}
	return info, nil
}
