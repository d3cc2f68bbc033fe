package storage

import (
	"fmt"
	"time"

	"github.com/canopy-db/canopy/internal/vlog"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// Mode chooses how a store keeps large values. It is a property of the
// store's configuration, not of its data: every mode reads values written
// by every other mode except ModePebble (whose separated values live inside
// Pebble), so a store may change between inline, rewrite and punch across
// restarts.
type Mode uint8

const (
	// ModeDefault is the zero value; it means ModeInline.
	ModeDefault Mode = iota
	// ModeInline keeps every value in the LSM (no separation).
	ModeInline
	// ModeRewrite separates large values into blob files and collects
	// garbage the way Titan classically does: pick files by discardable
	// ratio, copy their live records into new files, update the pointers.
	ModeRewrite
	// ModePunch separates like ModeRewrite and collects garbage in the
	// proposal's two stages: punch holes over dead, block-aligned spans of
	// the files with the most discardable bytes (no LSM write), then merge
	// files whose allocated size fell below a threshold, smallest first.
	ModePunch
	// ModePebble leaves separation to Pebble's own value separation
	// (Options.Experimental.ValueSeparationPolicy), for comparison.
	ModePebble
)

var modeNames = map[Mode]string{
	ModeDefault: "default", ModeInline: "inline", ModeRewrite: "rewrite", ModePunch: "punch", ModePebble: "pebble",
}

func (m Mode) String() string {
	if s, ok := modeNames[m]; ok {
		return s
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses a Mode's String form.
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if name == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("storage: unknown mode %q (want inline, rewrite, punch or pebble)", s)
}

// separates reports whether the engine itself writes blob files.
func (m Mode) separates() bool { return m == ModeRewrite || m == ModePunch }

// DefaultThresholdBytes is the default value size from which values are
// separated. It was chosen by measurement (docs/BENCHMARKS.md, "Value log
// (issue 3)"): 8 KiB is the smallest size measured at which punch mode's
// value log stays within 1.5 x the live data (1.42) while writing 4.2 x less
// than inline. Below it, 4 KiB alignment makes separation cost space: a
// 2 KiB value fills a block alone, and blocks shared by several small dead
// and live records cannot be punched.
const DefaultThresholdBytes = 8 << 10

// Options configure an Engine. The zero value is the default.
type Options struct {
	// FS is the file system; nil means the real OS file system. Tests pass
	// vfs.NewStrictMem() to simulate crashes that lose unsynced writes.
	FS vfs.FS
	// CacheBytes is the block cache size; 0 means 64 MiB.
	CacheBytes int64
	// MemTableBytes is the memtable size; 0 means 16 MiB.
	MemTableBytes uint64
	// NoSync turns every sync into a no-sync write, for the LSM and for blob
	// files. Dangerous: it breaks invariant I2 on power loss. Only for
	// benchmarks that say so.
	NoSync bool

	// Mode chooses value separation; see Mode.
	Mode Mode
	// ThresholdBytes: values under PrefixData of at least this many bytes
	// are separated (ModeRewrite, ModePunch) or offered to Pebble's value
	// separation (ModePebble). 0 means DefaultThresholdBytes.
	ThresholdBytes int
	// BlobFileTargetBytes: a blob file is sealed once it reaches this size.
	// 0 means 64 MiB. Smaller files make GC finer grained and the manifest
	// larger.
	BlobFileTargetBytes int64
	// BlobPlacement says where blob records larger than a block start; the
	// zero value, vlog.PackLarge, packs them (see vlog.Placement).
	BlobPlacement vlog.Placement
	// GC configures blob garbage collection.
	GC GCOptions
	// Fatal, if not nil, is called with Pebble's message when Pebble meets
	// an error it cannot continue after (a failed WAL write, for one: "no
	// space left on device"). It must not return; the command uses it to
	// print one error line and exit. nil: panic with the message.
	Fatal func(msg string)
	// ReadOnly opens the store for reading only: Pebble in read-only mode
	// (no flush, compaction or WAL recycling; the WAL is replayed in
	// memory), blob files opened read-only and left as they are (no
	// recovery of an active file, no removal of obsolete ones), no GC, and
	// every write refused. Every file of the store is left as it was; for
	// inspecting a stopped node's store (canopy debug store).
	ReadOnly bool
	// StatusFilterBitsPerKey sizes the Bloom filter of the status table's
	// keys (statusfilter.go): 0 means DefaultStatusFilterBitsPerKey, a
	// negative value writes no filter. Tables written with a filter are
	// read the same with or without one configured.
	StatusFilterBitsPerKey int
	// BlockBytes and IndexBlockBytes are Pebble's target data and index
	// block sizes, at every level; 0 means Pebble's default (4 KiB, and
	// the data block size for the index). For the status-table
	// experiments (canopy bench status).
	BlockBytes      int
	IndexBlockBytes int
	// DisableAutomaticCompactions leaves flushed tables where they are
	// (Pebble's option of the same name), for experiments that need a
	// given shape of the LSM. Never for a node.
	DisableAutomaticCompactions bool
	// Metrics, if not nil, is where the engine registers its Prometheus
	// collector (Pebble's metrics and the value log's counters, read at
	// scrape time; metrics.go) from Open until Close.
	Metrics prometheus.Registerer
}

// GCOptions configure blob garbage collection. The zero value is the default.
type GCOptions struct {
	// Disabled stops the background GC goroutine; RunGC still works. For
	// tests that step GC by hand.
	Disabled bool
	// Interval between background GC rounds when no write has kicked one;
	// 0 means 200 ms.
	Interval time.Duration
	// RewriteRatioMin (ModeRewrite): a file is rewritten once this fraction
	// of its record bytes is dead. 0 means 0.5, Titan's default
	// blob_file_discardable_ratio.
	RewriteRatioMin float64
	// PunchBytesMin (ModePunch, stage one): a file is punched once this many
	// dead bytes accrued since its last punch. 0 means BlobFileTargetBytes/8.
	PunchBytesMin int64
	// MergeBelowBytes (ModePunch, stage two): files whose allocated size is
	// below this are merged, smallest first. 0 means BlobFileTargetBytes/4.
	MergeBelowBytes int64
	// InputBytesMax bounds the live bytes one rewrite or merge job copies.
	// 0 means 2*BlobFileTargetBytes.
	InputBytesMax int64
	// PunchFilesMax bounds the files punched in one round; 0 means 4.
	PunchFilesMax int
	// ReaderWaitMax bounds how long GC waits for readers that may still hold
	// pointers into a span before it punches or deletes it; after that the
	// span is left for a later round. 0 means 1 s.
	ReaderWaitMax time.Duration
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 16 << 20
	}
	if o.Mode == ModeDefault {
		o.Mode = ModeInline
	}
	if o.StatusFilterBitsPerKey == 0 {
		o.StatusFilterBitsPerKey = DefaultStatusFilterBitsPerKey
	}
	if o.ThresholdBytes == 0 {
		o.ThresholdBytes = DefaultThresholdBytes
	}
	if o.BlobFileTargetBytes == 0 {
		o.BlobFileTargetBytes = 64 << 20
	}
	g := &o.GC
	if g.Interval == 0 {
		g.Interval = 200 * time.Millisecond
	}
	if g.RewriteRatioMin == 0 {
		g.RewriteRatioMin = 0.5
	}
	if g.PunchBytesMin == 0 {
		g.PunchBytesMin = o.BlobFileTargetBytes / 8
	}
	if g.MergeBelowBytes == 0 {
		g.MergeBelowBytes = o.BlobFileTargetBytes / 4
	}
	if g.InputBytesMax == 0 {
		g.InputBytesMax = 2 * o.BlobFileTargetBytes
	}
	if g.PunchFilesMax == 0 {
		g.PunchFilesMax = 4
	}
	if g.ReaderWaitMax == 0 {
		g.ReaderWaitMax = time.Second
	}
}

// Validate rejects contradictory or out-of-range settings. Call it after
// EnsureDefaults.
func (o *Options) Validate() error {
	switch {
	case o.BlobPlacement > vlog.AlignLarge:
		return fmt.Errorf("storage: invalid BlobPlacement %d", o.BlobPlacement)
	case o.Mode > ModePebble:
		return fmt.Errorf("storage: invalid mode %d", o.Mode)
	case o.StatusFilterBitsPerKey > StatusFilterBitsPerKeyMax:
		return fmt.Errorf("storage: StatusFilterBitsPerKey %d above %d", o.StatusFilterBitsPerKey, StatusFilterBitsPerKeyMax)
	case o.BlockBytes < 0 || o.BlockBytes > 1<<20 || o.IndexBlockBytes < 0 || o.IndexBlockBytes > 1<<20:
		return fmt.Errorf("storage: BlockBytes %d or IndexBlockBytes %d out of [0, 1 MiB]", o.BlockBytes, o.IndexBlockBytes)
	case o.ThresholdBytes < 1 || o.ThresholdBytes > 1<<30:
		return fmt.Errorf("storage: ThresholdBytes %d out of [1, 1 GiB]", o.ThresholdBytes)
	case o.BlobFileTargetBytes < 64<<10:
		return fmt.Errorf("storage: BlobFileTargetBytes %d below 64 KiB", o.BlobFileTargetBytes)
	case o.GC.RewriteRatioMin <= 0 || o.GC.RewriteRatioMin > 1:
		return fmt.Errorf("storage: GC.RewriteRatioMin %v out of (0, 1]", o.GC.RewriteRatioMin)
	case o.GC.PunchBytesMin < 0 || o.GC.MergeBelowBytes < 0 || o.GC.InputBytesMax <= 0 || o.GC.PunchFilesMax < 0:
		return fmt.Errorf("storage: negative GC limit")
	}
	return nil
}
