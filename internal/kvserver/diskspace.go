package kvserver

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"go.etcd.io/raft/v3/raftpb"
)

// A full disk stops writes before it stops the node (issue 13, item 4).
//
// Pebble cannot continue after a failed WAL write: "no space left on
// device" in a commit is fatal, and a flush that fails for lack of space is
// retried forever. So the node keeps the disk from filling:
//
//   - Every DiskCheckInterval it reads the free space of the store's file
//     system (statfs, the space available to the process). Below
//     StoreMinFreeBytes the store is "low": the node refuses new writes
//     (Put, PutIntent and CommitOnePC, which add data without bound) with
//     the retryable out-of-disk error (UNAVAILABLE, message
//     rpcpb.OutOfDiskPrefix...), and drops Raft messages that would append
//     entries or install a snapshot on this node; the range goes on with
//     its other replicas, and this one catches up once space returns.
//     Reads are served as usual. Writes that let transactions already
//     under way finish or clean up (intent resolution and recovery, status
//     and heartbeat records, one-phase-commit queries: all bounded per
//     transaction) still go through.
//   - At or above StoreMinFreeBytes again, writes are accepted at the next
//     check: recovery needs nobody.
//   - While low, the node logs one line per DiskFullLogInterval (with the
//     writes refused and messages dropped since the previous line), and one
//     line when space returns.
//   - At start, a store with less than half of StoreMinFreeBytes free is
//     refused (one error line, exit status 1): Pebble could not even
//     replay its log safely, and used to retry its flush in a loop.
//
// The threshold must exceed what can be written between two checks plus
// the temporary space of a flush or compaction: the default is 1% of the
// file system's size, at least 2 x the memtable size and at most 1 GiB
// (CockroachDB's ballast is 1% capped at 1 GiB likewise).
//
// Rejected for now: CockroachDB's ballast file (space reserved in the store
// directory and freed when the disk fills, so that an operator can restart
// a node that stopped on a full disk). With the threshold the node does not
// stop; a ballast would still help when something other than the node
// fills the disk, and may be added on top.
//
// Not covered: a leaseholder on a node with space does not know that the
// followers' disks are low; if a majority of a range's replicas are low,
// its writes wait for a quorum until the request timeout (AMBIGUOUS)
// rather than failing at once.

// Defaults of the disk space checks.
const (
	DefaultDiskCheckInterval   = time.Second
	DefaultDiskFullLogInterval = 10 * time.Second
	// StoreMinFreeBytesMax caps the default threshold.
	StoreMinFreeBytesMax = 1 << 30
)

// ErrDiskLow is returned by Start for a store whose disk has less than
// half of the threshold free.
var ErrDiskLow = errors.New("disk nearly full")

// diskSpace returns the bytes available to this process and the total
// size of the file system holding path (or its nearest existing parent:
// a new store's directory does not exist before Pebble creates it).
func diskSpace(path string) (free, total uint64, err error) {
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(path, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
		}
		parent := filepath.Dir(path)
		if !errors.Is(err, os.ErrNotExist) || parent == path {
			return 0, 0, fmt.Errorf("free space of %s: %w", path, err)
		}
		path = parent
	}
}

// defaultStoreMinFree is the default threshold for a file system of total
// bytes with the given memtable size.
func defaultStoreMinFree(total, memTableBytes uint64) uint64 {
	return min(max(total/100, 2*memTableBytes), StoreMinFreeBytesMax)
}

// diskMonitor tracks the free space of the store's file system.
type diskMonitor struct {
	dir         string
	minFree     uint64 // 0: disabled
	logInterval time.Duration
	log         *slog.Logger
	space       func(string) (free, total uint64, err error)

	// low: free space was below minFree at the last check.
	low atomic.Bool
	// refused and dropped count, since the last log line, the writes
	// refused and the Raft messages dropped.
	refused, dropped atomic.Uint64

	mu struct {
		sync.Mutex
		lastLog time.Time
		free    uint64
	}
}

// newDiskMonitor sets the threshold (cfg's, else the default) and refuses
// a store with less than half of it free.
func newDiskMonitor(cfg *Config) (*diskMonitor, error) {
	d := &diskMonitor{dir: cfg.StoreDir, logInterval: cfg.DiskFullLogInterval, log: cfg.Logger, space: diskSpace}
	if cfg.StoreMinFreeBytes < 0 {
		return d, nil
	}
	free, total, err := d.space(d.dir)
	if err != nil {
		return nil, err
	}
	d.minFree = uint64(cfg.StoreMinFreeBytes)
	if d.minFree == 0 {
		mem := cfg.Storage.MemTableBytes
		if mem == 0 {
			mem = 16 << 20 // storage.Options' default
		}
		d.minFree = defaultStoreMinFree(total, mem)
	}
	if free < d.minFree/2 {
		return nil, fmt.Errorf("store %s: %w: %s free of %s, less than half of the minimum free space (--store-min-free %s): "+
			"free space on its disk and start the node again (docs/OPERATIONS.md, \"A full disk\")",
			cfg.StoreDir, ErrDiskLow, formatBytes(free), formatBytes(total), formatBytes(d.minFree))
	}
	d.check(time.Now())
	return d, nil
}

// check reads the free space, updates low and logs (at most one line per
// logInterval while low, and one when space returns).
func (d *diskMonitor) check(now time.Time) {
	if d.minFree == 0 {
		return
	}
	free, _, err := d.space(d.dir)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		if now.Sub(d.mu.lastLog) >= d.logInterval {
			d.mu.lastLog = now
			d.log.Error("reading the free space of the store's disk", "store", d.dir, "err", err)
		}
		return // keep the last state
	}
	d.mu.free = free
	wasLow := d.low.Load()
	isLow := free < d.minFree
	d.low.Store(isLow)
	switch {
	case isLow && (!wasLow || now.Sub(d.mu.lastLog) >= d.logInterval):
		d.mu.lastLog = now
		d.log.Error("out of disk: refusing writes until space is freed",
			"store", d.dir, "free", formatBytes(free), "min_free", formatBytes(d.minFree),
			"writes_refused", d.refused.Swap(0), "raft_appends_dropped", d.dropped.Swap(0))
	case !isLow && wasLow:
		d.mu.lastLog = time.Time{}
		d.log.Info("disk space is back: accepting writes", "store", d.dir, "free", formatBytes(free),
			"min_free", formatBytes(d.minFree), "writes_refused", d.refused.Swap(0), "raft_appends_dropped", d.dropped.Swap(0))
	}
}

// refuseWrite returns the out-of-disk error for a batch that adds data
// while the disk is low, else nil.
func (d *diskMonitor) refuseWrite(req *rpcpb.BatchRequest, rangeID, nodeID uint64) *rpcpb.Error {
	if d == nil || !d.low.Load() {
		return nil
	}
	for _, ru := range req.Requests {
		switch ru.Method() {
		case rpcpb.MethodPut, rpcpb.MethodPutIntent, rpcpb.MethodCommitOnePC:
			d.refused.Add(1)
			d.mu.Lock()
			free := d.mu.free
			d.mu.Unlock()
			return pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%srange r%d on node n%d: store %s has %s free, below its minimum (%s); writes resume once space is freed",
				rpcpb.OutOfDiskPrefix, rangeID, nodeID, d.dir, formatBytes(free), formatBytes(d.minFree))
		}
	}
	return nil
}

// dropRaft reports whether m must be dropped because it would append
// entries, install a snapshot or take leadership while the disk is low.
func (d *diskMonitor) dropRaft(m *raftpb.Message) bool {
	if d == nil || !d.low.Load() {
		return false
	}
	// MsgTimeoutNow: a leadership transfer to this node (the preferred
	// leader of a range) would bring back a lease it cannot write under.
	if (m.Type == raftpb.MsgApp && len(m.Entries) > 0) || m.Type == raftpb.MsgSnap || m.Type == raftpb.MsgTimeoutNow {
		d.dropped.Add(1)
		return true
	}
	return false
}

// formatBytes prints n in the largest binary unit that keeps it >= 1.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
