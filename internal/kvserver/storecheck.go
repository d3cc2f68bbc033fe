package kvserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A damaged store is refused, never run into a Raft panic (issue 13,
// item 3).
//
// The Raft library trusts its storage: a HardState whose commit index lies
// past the end of the log, or an applied index outside [first-1, commit],
// panics in raft.NewRawNode, and a leader's heartbeat carrying a commit
// index past the end of a follower's log panics in the follower ("tocommit
// out of range"). A store gets there when files are lost or damaged (Pebble
// WAL files deleted, a truncated MANIFEST, flipped bytes in sstables) or
// when it is restored from an older copy of itself. Such a store may also
// have forgotten votes it cast and entries it acknowledged, which the rest
// of the cluster counted on: running it at all risks the cluster's safety,
// not only this node's. So the node refuses it:
//
//  1. At start (checkStore), before any replica is created: the store opens
//     (Pebble's open and corruption errors are reported with the file), its
//     identity is present if anything says it should be (a range on disk,
//     or the STORE-IDENT file written when the node joined), and each
//     range's persisted Raft state is consistent: truncated <= applied <=
//     commit <= last index of the log, a descriptor that decodes, a
//     configuration for an initialized range.
//  2. While running (checkHeartbeatCommit): a heartbeat's commit index is
//     at most the follower's match index, which the follower acknowledged
//     only after persisting it; one beyond the follower's persisted log
//     proves the store lost acknowledged entries. Locally consistent state
//     cannot show that, so it is checked on the message, before Raft sees
//     it. The node then stops (Node.Failed) and marks the store damaged
//     (the STORE-DAMAGED file), so that every later start is refused at
//     once instead of taking part in elections with a log it lost. A
//     replica being removed is not checked: its removal stops it, then
//     deletes its log, and a heartbeat that found it just before may read
//     the deletion (CI stop 33 took that for damage).
//
// Every refusal is one *StoreDamagedError: one line naming the store, the
// file where one is known, and what to do. The way back is to wipe the
// store and add the node again (docs/OPERATIONS.md, "A damaged store").
//
// Rejected: repairing in place (truncating the HardState to the log, or
// dropping the ranges whose state is inconsistent). The votes and
// acknowledgements the store lost cannot be recovered from it, and a
// replica that restarts from an older state under the same replica ID can
// vote twice in a term.

// ErrStoreDamaged marks errors of a store the node refuses to use.
var ErrStoreDamaged = errors.New("store damaged")

// Files in the store directory, beside Pebble's.
const (
	// StoreIdentFile holds the node's identity ("cluster <id> node <n>"),
	// written when the node joins or first starts with its identity.
	StoreIdentFile = "STORE-IDENT"
	// StoreDamagedFile, when present, holds the one-line reason the store
	// was found damaged while the node ran; the node refuses to start.
	StoreDamagedFile = "STORE-DAMAGED"
)

// damagedAdvice is what the operator should do with a damaged store.
const damagedAdvice = "the node cannot use this store: wipe it and add the node to the cluster again " +
	"(docs/OPERATIONS.md, \"A damaged store\")"

// StoreDamagedError says why a store is refused. Its message is one line.
type StoreDamagedError struct {
	Dir string
	// File is the file found damaged, if known.
	File string
	// Problem says what is wrong.
	Problem string
	// Err is the underlying error, if any.
	Err error
}

func (e *StoreDamagedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store %s is damaged: %s", e.Dir, e.Problem)
	if e.File != "" {
		fmt.Fprintf(&b, " (file %s)", e.File)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %s", oneLine(e.Err.Error()))
	}
	b.WriteString("; ")
	b.WriteString(damagedAdvice)
	return b.String()
}

// Unwrap makes errors.Is see ErrStoreDamaged and the underlying error.
func (e *StoreDamagedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrStoreDamaged}
	}
	return []error{ErrStoreDamaged, e.Err}
}

// oneLineMax bounds the underlying error's part of a refusal line (Pebble
// lists every missing file of a truncated MANIFEST).
const oneLineMax = 400

// oneLine joins a multi-line message into one line of at most oneLineMax
// bytes.
func oneLine(s string) string {
	// Pebble's corruption errors print a marker of the errors library.
	s = strings.ReplaceAll(s, "<corruption detail carrier>", "")
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Trim(l, " ;"); l != "" {
			lines = append(lines, l)
		}
	}
	out := strings.Join(lines, "; ")
	if len(out) > oneLineMax {
		out = out[:oneLineMax] + fmt.Sprintf("... (%d lines)", len(lines))
	}
	return out
}

// openStore opens the engine, turning the errors of a damaged store into a
// *StoreDamagedError, and checks the store (checkStore).
//
// The files Canopy keeps beside Pebble's (StoreIdentFile, StoreDamagedFile)
// are on the operating system's file system; a store on another vfs.FS (an
// in-memory one in tests) goes without them.
func openStore(dir string, opts storage.Options) (*storage.Engine, error) {
	osFiles := storage.IsOSFS(opts.FS)
	if b, err := os.ReadFile(filepath.Join(dir, StoreDamagedFile)); osFiles && err == nil {
		return nil, &StoreDamagedError{Dir: dir, File: filepath.Join(dir, StoreDamagedFile),
			Problem: "it was found damaged while the node ran: " + strings.TrimSpace(string(b))}
	}
	eng, err := storage.Open(dir, opts)
	if err != nil {
		if errors.Is(err, storage.ErrCorruption) || isPebbleOpenDamage(err) {
			return nil, &StoreDamagedError{Dir: dir, Problem: "its files do not open", Err: err}
		}
		if errors.Is(err, syscall.ENOSPC) {
			return nil, fmt.Errorf("store %s: %w: %w; free space on its disk and start the node again (docs/OPERATIONS.md, \"A full disk\")", dir, ErrDiskLow, err)
		}
		return nil, err
	}
	if err := checkStore(dir, eng, osFiles); err != nil {
		_ = eng.Close()
		return nil, err
	}
	return eng, nil
}

// isPebbleOpenDamage recognises Pebble's open errors about files that the
// MANIFEST names and the directory lacks (a truncated or older MANIFEST,
// deleted sstables), which Pebble does not mark as corruption.
func isPebbleOpenDamage(err error) bool {
	s := err.Error()
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(s, "no space left on device") {
		return false // a full disk, not a damaged store
	}
	if errors.Is(err, fs.ErrPermission) || strings.Contains(s, "permission denied") {
		return false // the process may not read its files: not damage
	}
	return strings.Contains(s, "file does not exist") || strings.Contains(s, "MANIFEST") ||
		strings.Contains(s, "unknown to the objstorage provider")
}

// checkStore checks a freshly opened store (step 1 of the comment above).
func checkStore(dir string, eng *storage.Engine, osFiles bool) error {
	damaged := func(problem string, err error) error {
		return &StoreDamagedError{Dir: dir, File: eng.CorruptFile(), Problem: problem, Err: err}
	}
	var ident *rpcpb.JoinRequest
	v, err := eng.Get(nodeIdentKey)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return damaged("its node identity does not read back", err)
	default:
		ident = &rpcpb.JoinRequest{}
		if err := proto.Unmarshal(v, ident); err != nil {
			return damaged("its node identity does not decode", err)
		}
	}
	identPath := filepath.Join(dir, StoreIdentFile)
	want, err := os.ReadFile(identPath)
	switch {
	case !osFiles:
	case err == nil && ident == nil:
		return &StoreDamagedError{Dir: dir, File: identPath,
			Problem: fmt.Sprintf("its node identity (%s) is missing from its data: files were lost (Pebble's WAL?)", strings.TrimSpace(string(want)))}
	case err == nil && strings.TrimSpace(string(want)) != identLine(ident):
		return &StoreDamagedError{Dir: dir, File: identPath,
			Problem: fmt.Sprintf("its data belongs to %s, its %s file to %s", identLine(ident), StoreIdentFile, strings.TrimSpace(string(want)))}
	case errors.Is(err, os.ErrNotExist) && ident != nil:
		// A store from before the file existed, or a crash between the
		// join and this write: write it now.
		if err := writeIdentFile(dir, ident); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}

	ids, err := registeredRanges(eng)
	if err != nil {
		return damaged("its range registry does not read back", err)
	}
	if ident == nil && len(ids) > 0 {
		return damaged(fmt.Sprintf("it holds %d ranges but no node identity: files were lost (Pebble's WAL?)", len(ids)), nil)
	}
	for _, id := range ids {
		if err := checkRange(eng, id); err != nil {
			return damaged(fmt.Sprintf("range r%d", id), err)
		}
	}
	if _, err := loadPartRecords(eng); err != nil {
		return damaged("its hierarchy part records do not read back", err)
	}
	return nil
}

// identLine is the content of StoreIdentFile for ident.
func identLine(ident *rpcpb.JoinRequest) string {
	if ident == nil {
		return "no identity"
	}
	return fmt.Sprintf("cluster %s node n%d", ident.Settings.GetClusterId(), ident.NodeId)
}

// recordIdent writes StoreIdentFile for the identity the node just
// joined with. A failure is logged, not returned: the file only sharpens
// later checks, and the next start writes it.
func (n *Node) recordIdent(ident *rpcpb.JoinRequest) {
	if fs := n.cfg.Storage.FS; fs != nil && fs != vfs.Default {
		return
	}
	if err := writeIdentFile(n.cfg.StoreDir, ident); err != nil {
		n.log.Error("writing the store's identity file", "file", StoreIdentFile, "err", err)
	}
}

// writeIdentFile writes StoreIdentFile atomically (temporary file, sync,
// rename, sync of the directory).
func writeIdentFile(dir string, ident *rpcpb.JoinRequest) error {
	return writeFileAtomic(dir, StoreIdentFile, identLine(ident)+"\n")
}

func writeFileAtomic(dir, name, content string) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// registeredRanges lists the range IDs of the store's registry.
func registeredRanges(eng storage.Reader) ([]uint64, error) {
	it, err := eng.NewIter(registryKey(0), registryKey(^uint64(0)))
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		ids = append(ids, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return nil, err
	}
	return ids, it.Close()
}

// checkRange checks one range's persisted state: what raft.NewRawNode
// would otherwise panic on, and what it silently trusts.
func checkRange(eng storage.Reader, rangeID uint64) error {
	d, err := loadDesc(eng, rangeID)
	if err != nil {
		return err
	}
	info, err := replica.Inspect(eng, rangeID)
	if err != nil {
		return err
	}
	hs := info.HardState
	switch {
	case info.Applied > info.LastIndex:
		// (The stored commit index may lag the applied one, which
		// Inspect raises it to: a commit-only HardState is not written.)
		return fmt.Errorf("its Raft state says index %d is applied but its log ends at %d", info.Applied, info.LastIndex)
	case hs.Commit > info.LastIndex:
		return fmt.Errorf("its Raft state says index %d is committed but its log ends at %d", hs.Commit, info.LastIndex)
	case info.Applied != 0 && info.Applied < info.Truncated:
		return fmt.Errorf("its Raft state says index %d is applied but its log is truncated up to %d", info.Applied, info.Truncated)
	case d != nil && len(info.ConfState.Voters) == 0:
		return errors.New("it has a descriptor but no Raft configuration")
	case d != nil && d.RangeId != rangeID:
		return fmt.Errorf("its descriptor is of r%d", d.RangeId)
	}
	return nil
}

// persistedLastIndex returns the last index of rangeID's persisted Raft
// log: the last entry's, or the truncated index if no entry is left (0 for
// a range with no state). It reads two keys, not the log.
func persistedLastIndex(eng storage.Reader, rangeID uint64) (uint64, error) {
	var last uint64
	v, err := eng.Get(storage.RangeLocalKey(rangeID, storage.SuffixTruncated))
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return 0, err
	case len(v) != 16:
		return 0, fmt.Errorf("truncated state of %d bytes: %w", len(v), storage.ErrCorruption)
	default:
		last = binary.BigEndian.Uint64(v)
	}
	it, err := eng.NewIter(storage.RaftLogKey(rangeID, 0), storage.RangeLocalKey(rangeID, storage.SuffixRaftLog+1))
	if err != nil {
		return 0, err
	}
	if it.Last() {
		k := it.Key()
		last = max(last, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return 0, err
	}
	return last, it.Close()
}

// storeFailure is the node's record of a store found damaged while it ran.
type storeFailure struct {
	once sync.Once
	done chan struct{}
	err  error // set before done is closed
}

func (f *storeFailure) init() { f.done = make(chan struct{}) }

// Failed is closed when the node found its store damaged while running
// (see storecheck.go); the node then drops every Raft message and must be
// stopped. Err says why.
func (n *Node) Failed() <-chan struct{} { return n.failure.done }

// Err returns why the node failed (a *StoreDamagedError), or nil.
func (n *Node) Err() error {
	select {
	case <-n.failure.done:
		return n.failure.err
	default:
		return nil
	}
}

func (n *Node) failed() bool {
	select {
	case <-n.failure.done:
		return true
	default:
		return false
	}
}

// failStore records the first damage found while running, marks the store
// (StoreDamagedFile) and logs it once.
func (n *Node) failStore(err *StoreDamagedError) {
	n.failure.once.Do(func() {
		reason := fmt.Sprintf("%s: %s", time.Now().UTC().Format(time.RFC3339), err.Problem)
		if fs := n.cfg.Storage.FS; fs != nil && fs != vfs.Default {
			// No side files for a store on another file system (openStore).
		} else if werr := writeFileAtomic(n.cfg.StoreDir, StoreDamagedFile, reason+"\n"); werr != nil {
			n.log.Error("marking the store damaged", "file", StoreDamagedFile, "err", werr)
		}
		n.log.Error("store damaged: stopping", "err", err)
		n.failure.err = err
		close(n.failure.done)
	})
}

// checkHeartbeatCommit reports false, after failing the node, if m is a
// heartbeat whose commit index lies beyond rr's persisted log (step 2 of
// the comment above). Raft would panic stepping it.
//
// The follower's published commit index is a lower bound of its last
// index, so the engine is read only when the heartbeat's commit is above
// it (a follower catching up), not for every heartbeat.
func (n *Node) checkHeartbeatCommit(rr *rangeReplica, m *raftpb.Message) bool {
	if m.Type != raftpb.MsgHeartbeat || m.Commit <= rr.r.Status().Commit {
		return true
	}
	last, err := persistedLastIndex(n.eng, rr.r.RangeID())
	if err != nil {
		n.failStore(&StoreDamagedError{Dir: n.cfg.StoreDir, File: n.eng.CorruptFile(),
			Problem: fmt.Sprintf("range r%d: its Raft log does not read back", rr.r.RangeID()), Err: err})
		return false
	}
	if m.Commit <= last {
		return true
	}
	if rr.r.Stopped() {
		// Being removed (removeReplica stops the replica before it deletes
		// its log): the log read may be the deletion's, not damage. The
		// message is dropped, as any message to a stopped replica.
		return false
	}
	n.failStore(&StoreDamagedError{Dir: n.cfg.StoreDir, Problem: fmt.Sprintf(
		"range r%d: its Raft leader n%d says log index %d is committed and was acknowledged here, but this store's Raft log ends at %d: "+
			"the store lost acknowledged writes (restored from an older copy, or Pebble's WAL was lost)",
		rr.r.RangeID(), m.From, m.Commit, last)})
	return false
}
