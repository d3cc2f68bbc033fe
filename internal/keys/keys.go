// Package keys defines Canopy's logical keyspace.
//
// Every key a range holds is a logical key. System keys start with 0x00,
// user keys with 0x01 (the client library adds and strips that byte, so a
// user may use any bytes as a key):
//
//	0x00 'a' + end key of a range       meta: range descriptor (plain key)
//	0x00 'b' 'n' + node ID (8 bytes)    meta: node descriptor (plain key)
//	0x00 'b' 'r'                        meta: last allocated range ID (plain key)
//	0x00 'b' 'c'                        settings chosen at init (plain key)
//	0x00 'b' 'l'                        lease placement setting (plain key)
//	0x00 'b' 's'                        transaction switches setting (plain key)
//	0x00 'c'                            oracle upper bound (plain key)
//	0x00 'e' + ^version (8 bytes)       status encoding schedule (plain key)
//	0x00 'h' + reversed start_ts        transaction heartbeat record (plain key)
//	0x00 's' + encoding's key           transaction status table (plain key)
//	0x01 + user key                     user data (MVCC)
//
// Initial range layout (see kvserver.Bootstrap):
//
//	r1 ["", 0x00 'h')                   meta and oracle; never split
//	r2 [0x00 'h', 0x00 's')             heartbeat records
//	status ranges over [0x00 's', 0x01), pre-split so that consecutive
//	  start timestamps land on different ranges (the tickets row key is bit
//	  reversed, so its top bits vary fastest)
//	user ranges over [0x01, 0xff), pre-split on request
package keys

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

var (
	// MinKey is the first logical key; MaxKey bounds the keyspace.
	MinKey = []byte{}
	MaxKey = []byte{0xff}

	MetaPrefix = []byte{0x00, 'a'}
	NodePrefix = []byte{0x00, 'b', 'n'}
	// RangeIDKey holds the last allocated range ID (8 bytes big endian).
	RangeIDKey = []byte{0x00, 'b', 'r'}
	// ClusterSettingsKey holds the cluster's settings chosen at init (the
	// marshalled rpcpb.ClusterSettings: status encoding, replication
	// factor, commit protocol), written once at bootstrap in range 1.
	ClusterSettingsKey = []byte{0x00, 'b', 'c'}
	// LeasePlacementKey holds the lease placement cluster setting (the
	// name of an allocator.LeasePlacement), changeable at run time; absent
	// means the default.
	LeasePlacementKey = []byte{0x00, 'b', 'l'}
	OracleBoundKey    = []byte{0x00, 'c'}
	// MetaEnd bounds the meta records.
	MetaEnd         = []byte{0x00, 'a' + 1}
	HeartbeatPrefix = []byte{0x00, 'h'}
	// StatusSchedulePrefix + ^version (8 bytes big endian): the versions of
	// the status encoding schedule (txnstatus.Schedule), newest first.
	StatusSchedulePrefix = []byte{0x00, 'e'}
	// StatusScheduleEnd bounds the schedule's versions.
	StatusScheduleEnd = []byte{0x00, 'e' + 1}
	StatusPrefix      = []byte{0x00, 's'}
	UserPrefix        = []byte{0x01}
	UserEnd           = []byte{0x02}
)

// Limits on user input, enforced by client and server (InvalidArgument).
const (
	// KeyBytesMax is the largest user key.
	KeyBytesMax = 4 << 10
	// ValueBytesMax is the largest value.
	ValueBytesMax = 4 << 20
	// TxnKeysMax is the most keys one transaction may write.
	TxnKeysMax = 10000
	// RequestBytesMax is the largest request a node accepts.
	RequestBytesMax = 32 << 20
)

// UserKey maps a user key into the logical keyspace.
func UserKey(k []byte) []byte {
	out := make([]byte, 1+len(k))
	out[0] = UserPrefix[0]
	copy(out[1:], k)
	return out
}

// StripUser is the inverse of UserKey.
func StripUser(k []byte) ([]byte, error) {
	if len(k) == 0 || k[0] != UserPrefix[0] {
		return nil, fmt.Errorf("keys: %q is not a user key", k)
	}
	return k[1:], nil
}

// UserSpanEnd maps the end of a user scan; an empty end means "to the end
// of the user keyspace".
func UserSpanEnd(end []byte) []byte {
	if len(end) == 0 {
		return append([]byte(nil), UserEnd...)
	}
	return UserKey(end)
}

// IsUser reports whether k is in the user keyspace.
func IsUser(k []byte) bool { return len(k) > 0 && k[0] == UserPrefix[0] }

// MetaKey is the meta record key of a range with the given end key.
func MetaKey(rangeEnd []byte) []byte { return append(append([]byte(nil), MetaPrefix...), rangeEnd...) }

// MetaLookupKey is the key to SeekGE to find the range containing k: the
// first meta record whose end key is greater than k.
func MetaLookupKey(k []byte) []byte { return append(MetaKey(k), 0x00) }

// NodeKey is the key of a node descriptor.
func NodeKey(nodeID uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), NodePrefix...), nodeID)
}

// HeartbeatKey is the key of the heartbeat record of the transaction that
// started at startTs. The timestamp is bit reversed to spread records.
func HeartbeatKey(startTs uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), HeartbeatPrefix...), bits.Reverse64(startTs))
}

// StatusScheduleKey is the key of version v of the status encoding
// schedule. Versions are stored complemented, so the newest sorts first
// and a scan of StatusSchedulePrefix with limit 1 finds it.
func StatusScheduleKey(v uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), StatusSchedulePrefix...), ^v)
}

// StatusScheduleVersion inverts StatusScheduleKey.
func StatusScheduleVersion(k []byte) (uint64, error) {
	if len(k) != len(StatusSchedulePrefix)+8 || !bytes.HasPrefix(k, StatusSchedulePrefix) {
		return 0, fmt.Errorf("keys: %x is not a status schedule key", k)
	}
	return ^binary.BigEndian.Uint64(k[len(StatusSchedulePrefix):]), nil
}

// StatusKey prefixes an encoding's key with StatusPrefix.
func StatusKey(encoded []byte) []byte {
	return append(append([]byte(nil), StatusPrefix...), encoded...)
}

// StatusSplitKeys returns n-1 split points that divide the status table in
// n ranges by the top bits of the first byte after the prefix. n must be a
// power of two no larger than 256.
func StatusSplitKeys(n int) [][]byte {
	var out [][]byte
	for i := 1; i < n; i++ {
		out = append(out, append(append([]byte(nil), StatusPrefix...), byte(i*256/n)))
	}
	return out
}

// IsStatusSplitKey reports whether k is a split point of the status table
// of the form StatusSplitKeys returns: StatusPrefix and one byte. Such a
// point never separates a status key from its staging key (both start
// with the same byte after the prefix).
func IsStatusSplitKey(k []byte) bool {
	return len(k) == len(StatusPrefix)+1 && bytes.HasPrefix(k, StatusPrefix) && k[len(StatusPrefix)] != 0
}

// UserSplitKeys returns n-1 split points dividing the user keyspace
// evenly by the first byte of the user key (by its first two bytes when n
// is above 256; n at most 65536).
func UserSplitKeys(n int) [][]byte {
	var out [][]byte
	for i := 1; i < n; i++ {
		if n <= 256 {
			out = append(out, UserKey([]byte{byte(i * 256 / n)}))
		} else {
			v := i * 65536 / n
			out = append(out, UserKey([]byte{byte(v >> 8), byte(v)}))
		}
	}
	return out
}

// Next returns the smallest key greater than k.
func Next(k []byte) []byte { return append(append([]byte(nil), k...), 0) }

// Contains reports whether k is in [start, end).
func Contains(start, end, k []byte) bool {
	return bytes.Compare(k, start) >= 0 && bytes.Compare(k, end) < 0
}
