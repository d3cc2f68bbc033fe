package storage

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// Storage settings for the transaction status table (issue 10 item 6; the
// record's Cassandra table tuning: bloom_filter_fp_chance, index interval,
// chunk length).
//
// Pebble's settings are per level, not per key range, so a store-wide
// bloom filter would also cover every MVCC key, whose reads are scans and
// seeks a whole-key filter does not serve. The status table is read by
// point lookups of one key each (a status record), and half of them may
// miss (a pending transaction has no record): exactly what a filter is
// for. So the filter policy below is key-prefix aware: its writer adds only
// the physical keys of the status table to a table's filter, and its
// MayContain answers "maybe" for every other key, so the rest of the store
// reads as before and pays no filter memory.
//
// Block size stays Pebble's default (4 KiB) for the store: it is shared
// with user data, and the status-table read experiment (docs/BENCHMARKS.md,
// "Status table") found no gain from larger blocks worth imposing on it.

// statusTablePrefix is the physical prefix of every status-table key: the
// plain slot of a logical key under keys.StatusPrefix (0x00 's'), written
// PrefixData + mvcc's escaping of 0x00 (0x00 0xff) + 's'. A test in package
// mvcc checks it against mvcc.PlainKey(keys.StatusKey(...)).
var statusTablePrefix = []byte{PrefixData, 0x00, 0xff, 's'}

// StatusTablePrefix returns the physical prefix of the status table's keys.
func StatusTablePrefix() []byte { return bytes.Clone(statusTablePrefix) }

// DefaultStatusFilterBitsPerKey is the status-table filter's size per key:
// 20 bits, about 0.01% false positives, the record's
// bloom_filter_fp_chance of 0.0001 (a Bloom filter with k optimal probes
// has a false-positive rate of about 0.6185^bits).
const DefaultStatusFilterBitsPerKey = 20

// StatusFilterBitsPerKeyMax bounds Options.StatusFilterBitsPerKey.
const StatusFilterBitsPerKeyMax = 64

// statusFilterName is written into every table's properties; Pebble uses a
// table's filter only when the configured policy has the name the table
// was written with. Never change it for a different layout: give the new
// layout a new name.
const statusFilterName = "canopy.StatusTableBloom.v1"

// statusFilter is the key-prefix-aware filter policy: a Bloom filter of
// the status-table keys of a table.
type statusFilter struct{ bits int }

var _ pebble.FilterPolicy = statusFilter{}

func (statusFilter) Name() string { return statusFilterName }

func (f statusFilter) MayContain(ftype pebble.FilterType, filter, key []byte) bool {
	if !bytes.HasPrefix(key, statusTablePrefix) {
		return true
	}
	return bloom.FilterPolicy(f.bits).MayContain(ftype, filter, key)
}

func (f statusFilter) NewWriter(ftype pebble.FilterType) pebble.FilterWriter {
	return statusFilterWriter{bloom.FilterPolicy(f.bits).NewWriter(ftype)}
}

// statusFilterWriter adds only status-table keys to the Bloom filter.
type statusFilterWriter struct{ w pebble.FilterWriter }

func (w statusFilterWriter) AddKey(key []byte) {
	if bytes.HasPrefix(key, statusTablePrefix) {
		w.w.AddKey(key)
	}
}

func (w statusFilterWriter) Finish(dst []byte) []byte { return w.w.Finish(dst) }

// levelOptions returns the per-level options of the store: the status-table
// filter (unless disabled) and the block sizes, the same at every level.
func (o *Options) levelOptions() [7]pebble.LevelOptions {
	var lv [7]pebble.LevelOptions
	for i := range lv {
		if o.StatusFilterBitsPerKey > 0 {
			lv[i].FilterPolicy = statusFilter{bits: o.StatusFilterBitsPerKey}
		}
		lv[i].BlockSize = o.BlockBytes
		lv[i].IndexBlockSize = o.IndexBlockBytes
	}
	return lv
}
