package storage

import "encoding/binary"

// Physical key prefixes. Each prefix owns a disjoint part of the engine's
// keyspace; no code outside the owner of a prefix writes under it.
const (
	// PrefixRangeLocal + rangeID (8 bytes, big endian) + suffix byte (+ more).
	PrefixRangeLocal byte = 0x01
	// PrefixData + logical key encoding chosen by package mvcc.
	PrefixData byte = 0x02
	// PrefixNodeLocal + name.
	PrefixNodeLocal byte = 0x03
)

// Suffixes under PrefixRangeLocal.
const (
	SuffixRaftLog     byte = 'l' // + index (8 bytes BE) -> raftpb.Entry
	SuffixHardState   byte = 'h' // -> raftpb.HardState
	SuffixApplied     byte = 'a' // -> applied index, term (16 bytes)
	SuffixDescriptor  byte = 'd' // -> range descriptor
	SuffixTruncated   byte = 't' // -> index, term of the last truncated entry
	SuffixConfState   byte = 'c' // -> raftpb.ConfState
	SuffixGCThreshold byte = 'g' // -> MVCC GC threshold (8 bytes BE)
	// SuffixTombstone: the range's replica here was removed; the lowest
	// replica ID it may have here again (8 bytes BE). kvserver.
	SuffixTombstone byte = 'x'
)

// RangeLocalKey returns PrefixRangeLocal + rangeID + suffix.
func RangeLocalKey(rangeID uint64, suffix byte) []byte {
	k := make([]byte, 0, 10)
	k = append(k, PrefixRangeLocal)
	k = binary.BigEndian.AppendUint64(k, rangeID)
	return append(k, suffix)
}

// RaftLogKey returns the key of the Raft log entry at index for rangeID.
func RaftLogKey(rangeID, index uint64) []byte {
	k := RangeLocalKey(rangeID, SuffixRaftLog)
	return binary.BigEndian.AppendUint64(k, index)
}

// DataKey returns PrefixData + k.
func DataKey(k []byte) []byte {
	out := make([]byte, 1+len(k))
	out[0] = PrefixData
	copy(out[1:], k)
	return out
}

// DataSpanEnd returns the first physical key after all data keys.
func DataSpanEnd() []byte { return []byte{PrefixData + 1} }

// NodeLocalKey returns PrefixNodeLocal + name.
func NodeLocalKey(name string) []byte {
	return append([]byte{PrefixNodeLocal}, name...)
}
