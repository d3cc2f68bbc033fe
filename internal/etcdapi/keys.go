package etcdapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
)

// The etcd keyspace inside Canopy's user keyspace. Everything the etcd API
// stores lives under Prefix, so that etcd keys never mix with keys written
// through Canopy's own API (a Canopy user who scans "" sees them, under
// this prefix, and should leave them alone):
//
//	Prefix "k" etcdKey             -> envelope(version, create, lease) ++ value
//	Prefix "l" leaseID(8, BE)      -> lease record (granted TTL, expiry)
//	Prefix "i" leaseID(8, BE) key  -> 0x01: the lease's key index
//	Prefix "m" "compact"           -> the compacted revision (8, BE)
//
// A key's mod_revision is the commit timestamp of the version read (Canopy
// keeps it with every version), so it is not stored: a transaction does
// not know its commit timestamp while it writes. create_revision is
// stored, except in the version that created the key, where 0 says "the
// creating transaction's commit timestamp, i.e. this version's own". The
// lease index lets a revocation find the keys to delete without a scan of
// the whole keyspace.
var (
	// Prefix is the user-key prefix of everything the etcd API stores.
	Prefix = []byte("\x00etcd/")

	dataPrefix    = join(Prefix, "k")
	leasePrefix   = join(Prefix, "l")
	indexPrefix   = join(Prefix, "i")
	compactKey    = join(Prefix, "mcompact")
	dataPrefixEnd = join(Prefix, "l") // just past every data key
)

// KeyBytesMax is the largest etcd key: Canopy's key limit less the
// prefixes (the lease index's is the longest: Prefix, "i", the lease ID).
const KeyBytesMax = keys.KeyBytesMax - 6 - 1 - 8

func join(p []byte, s string) []byte { return append(bytes.Clone(p), s...) }

func dataKey(k []byte) []byte { return append(bytes.Clone(dataPrefix), k...) }

func leaseKey(id int64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(leasePrefix), uint64(id))
}

func indexKey(id int64, k []byte) []byte {
	return append(binary.BigEndian.AppendUint64(bytes.Clone(indexPrefix), uint64(id)), k...)
}

func indexPrefixOf(id int64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(indexPrefix), uint64(id))
}

// dataSpan maps etcd's [key, rangeEnd) to Canopy keys: rangeEnd empty is
// the one key; "\x00" is every key at or after key.
func dataSpan(key, rangeEnd []byte) (start, end []byte) {
	start = dataKey(key)
	switch {
	case len(rangeEnd) == 0:
		return start, append(bytes.Clone(start), 0)
	case len(rangeEnd) == 1 && rangeEnd[0] == 0:
		return start, bytes.Clone(dataPrefixEnd)
	}
	return start, dataKey(rangeEnd)
}

// envelope is what a data key's value carries besides the user's value.
type envelope struct {
	// version counts the key's modifications since its creation (1 for
	// the creating put).
	version int64
	// create is the key's create_revision, or 0 in the version that
	// created it (then it is the version's own commit timestamp).
	create int64
	// lease is the ID of the lease the key is attached to (0: none).
	lease int64
}

const envelopeFormat = 1

// errCorrupt: a value under the etcd prefix that is not an envelope.
var errCorrupt = errors.New("etcdapi: corrupt envelope")

func encodeEnvelope(e envelope, value []byte) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(value))
	b = append(b, envelopeFormat)
	b = binary.AppendUvarint(b, uint64(e.version))
	b = binary.AppendUvarint(b, uint64(e.create))
	b = binary.AppendUvarint(b, uint64(e.lease))
	return append(b, value...)
}

func decodeEnvelope(b []byte) (envelope, []byte, error) {
	if len(b) == 0 || b[0] != envelopeFormat {
		return envelope{}, nil, fmt.Errorf("%w: format byte %x", errCorrupt, b[:min(len(b), 1)])
	}
	b = b[1:]
	var e envelope
	for _, f := range []*int64{&e.version, &e.create, &e.lease} {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<63-1 {
			return envelope{}, nil, fmt.Errorf("%w: bad varint", errCorrupt)
		}
		*f, b = int64(v), b[n:]
	}
	if e.version <= 0 {
		return envelope{}, nil, fmt.Errorf("%w: version %d", errCorrupt, e.version)
	}
	return e, b, nil
}

// leaseRecord is a lease as stored.
type leaseRecord struct {
	// ttlSeconds is the TTL granted.
	ttlSeconds int64
	// expiryMs is when the lease expires, in the oracle's milliseconds
	// (the physical part of a Canopy timestamp).
	expiryMs int64
}

func encodeLease(r leaseRecord) []byte {
	b := []byte{envelopeFormat}
	b = binary.AppendUvarint(b, uint64(r.ttlSeconds))
	return binary.AppendUvarint(b, uint64(r.expiryMs))
}

func decodeLease(b []byte) (leaseRecord, error) {
	if len(b) == 0 || b[0] != envelopeFormat {
		return leaseRecord{}, fmt.Errorf("%w: lease record format", errCorrupt)
	}
	b = b[1:]
	var r leaseRecord
	for _, f := range []*int64{&r.ttlSeconds, &r.expiryMs} {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<63-1 {
			return leaseRecord{}, fmt.Errorf("%w: lease record varint", errCorrupt)
		}
		*f, b = int64(v), b[n:]
	}
	return r, nil
}
