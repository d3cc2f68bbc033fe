package kvserver

// Raft snapshots, streamed in bounded chunks.
//
// A range's snapshot can be far larger than any message (a range grows up
// to RangeMaxSize before it splits, and more when splits lag behind
// writes), so the data never travels inside the Raft message:
//
//   - Sender. When Raft asks for a snapshot (replica.makeSnapshot), the
//     range's state machine registers the engine snapshot taken at the
//     applied index under a stream ID and returns, as the snapshot's data,
//     only the range's state (RangeState: descriptor, GC threshold) and
//     that ID. When the transport sends the MsgSnap, it hands it to
//     sendSnapshot, on a goroutine of its own (heartbeats and appends to
//     that peer go on meanwhile), which streams the range's pairs from the
//     engine snapshot in chunks of about SnapshotChunkBytes over the
//     Snapshots.Send RPC, then a final chunk with their count and
//     CRC-32C. The engine snapshot is closed when the stream ends; one
//     never sent is closed after SnapshotStreamTTL.
//   - Receiver. The Snapshots service checks the stream's header as
//     receiveRaft checks a MsgSnap, writes the chunks to a file under the
//     store's snapshots directory, verifies count and checksum, and only
//     then steps the MsgSnap, whose data now names the staged file.
//   - Apply (rangeSM.ApplySnapshot). A small snapshot is applied in the
//     Ready's batch as before. A larger one (over SnapshotApplyBatchBytes)
//     is applied in several batches so that no batch holds the whole
//     range: first a marker naming the range and its span, with the
//     clearing of the span, synced; then the pairs in batches of bounded
//     size; the Ready's batch finally writes the range's state and removes
//     the marker. A node that restarts with a marker present (it stopped
//     mid-apply) resets that replica to uninitialized, keeping only its
//     Raft term and vote (recoverSnapshotApplies); its leader sends it a
//     snapshot again.
//
// Memory on both sides is bounded by the chunk and batch sizes and gRPC's
// flow-control window, never by the range's size.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

var (
	// SnapshotChunkBytes is the size a snapshot stream's chunk reaches
	// before it is sent (a chunk holds whole pairs, so one large value
	// makes a larger chunk).
	SnapshotChunkBytes = 256 << 10
	// SnapshotApplyBatchBytes bounds the batches a staged snapshot is
	// applied in; a snapshot no larger is applied in the Ready's batch.
	SnapshotApplyBatchBytes = 4 << 20
	// SnapshotStreamTTL is how long an engine snapshot registered for a
	// stream waits to be sent before it is closed.
	SnapshotStreamTTL = time.Minute
	// SnapshotSendTimeout bounds each Send of a snapshot stream's chunks
	// (and the final answer), so a stalled peer fails the stream.
	SnapshotSendTimeout = 10 * time.Second
	// SnapshotStreamsMax bounds the snapshot streams a node sends, and
	// those it receives, at once; more are refused, and Raft retries.
	SnapshotStreamsMax = 2
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// snapshotMarkerKey marks, in node-local space, a snapshot of rangeID
// being applied in several batches; its value is the span cleared.
func snapshotMarkerKey(rangeID uint64) []byte {
	return binary.BigEndian.AppendUint64(storage.NodeLocalKey("snapshot-applying/"), rangeID)
}

// outgoingSnapshot is an engine snapshot registered for a stream.
type outgoingSnapshot struct {
	snap    *storage.Snapshot
	state   *rpcpb.RangeState
	created time.Time
}

// snapshotRegistry holds the engine snapshots of snapshots made by Raft
// and not yet streamed.
type snapshotRegistry struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]*outgoingSnapshot
}

// register keeps snap (ownership passes to the registry) and returns its
// stream ID.
func (r *snapshotRegistry) register(snap *storage.Snapshot, st *rpcpb.RangeState, now time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[uint64]*outgoingSnapshot{}
	}
	r.next++
	r.m[r.next] = &outgoingSnapshot{snap: snap, state: st, created: now}
	return r.next
}

// take removes and returns the snapshot of stream id (nil if unknown or
// expired); the caller closes it.
func (r *snapshotRegistry) take(id uint64) *outgoingSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.m[id]
	delete(r.m, id)
	return o
}

// expire closes the snapshots registered before cutoff (a nil cutoff:
// all of them).
func (r *snapshotRegistry) expire(cutoff time.Time) int {
	r.mu.Lock()
	var old []*outgoingSnapshot
	for id, o := range r.m {
		if cutoff.IsZero() || o.created.Before(cutoff) {
			old = append(old, o)
			delete(r.m, id)
		}
	}
	r.mu.Unlock()
	for _, o := range old {
		o.snap.Close()
	}
	return len(old)
}

// snapshots returns the node's engine snapshots waiting to be streamed.
func (n *Node) snapshots() *snapshotRegistry { return &n.outSnaps }

// SnapshotData implements replica.StateMachine: it registers snap for a
// stream and returns the range's state with the stream's ID.
func (s *rangeSM) SnapshotData(snap *storage.Snapshot) ([]byte, error) {
	desc := s.Desc()
	if desc == nil {
		snap.Close()
		return nil, errors.New("uninitialized replica cannot make a snapshot")
	}
	gcThreshold, err := loadGCThreshold(snap, s.rangeID)
	if err != nil {
		snap.Close()
		return nil, err
	}
	st := &rpcpb.RangeState{Range: desc, GcThreshold: gcThreshold}
	st.StreamId = s.n.snapshots().register(snap, st, time.Now())
	return encodeSnapshotHeader(st)
}

// encodeSnapshotHeader returns snapshot data made of st alone.
func encodeSnapshotHeader(st *rpcpb.RangeState) ([]byte, error) {
	hb, err := proto.Marshal(st)
	if err != nil {
		return nil, err
	}
	return append(binary.AppendUvarint(nil, uint64(len(hb))), hb...), nil
}

// streamPairs reads the range's pairs from o's engine snapshot and hands
// them to emit in chunks of about SnapshotChunkBytes (emit may keep none
// of the chunk's bytes). It returns the count of pairs and their CRC-32C.
func streamPairs(o *outgoingSnapshot, emit func(chunk []byte) error) (count uint64, crc uint32, err error) {
	buf := make([]byte, 0, SnapshotChunkBytes+4096)
	desc := o.state.Range
	err = mvcc.IterateSpan(o.snap, desc.StartKey, desc.EndKey, func(k, v []byte) error {
		start := len(buf)
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		crc = crc32.Update(crc, crcTable, buf[start:])
		count++
		if len(buf) >= SnapshotChunkBytes {
			if err := emit(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		return nil
	})
	if err == nil && len(buf) > 0 {
		err = emit(buf)
	}
	return count, crc, err
}

// inlineSnapshot returns the data of an inline snapshot (the range's state
// followed by its pairs) for a streamed snapshot's data made on this host;
// the stepped harness delivers snapshots this way.
func inlineSnapshot(reg *snapshotRegistry, data []byte) ([]byte, error) {
	st, _, err := snapshotState(data)
	if err != nil {
		return nil, err
	}
	o := reg.take(st.StreamId)
	if o == nil {
		return nil, fmt.Errorf("kvserver: snapshot stream %d: no such engine snapshot", st.StreamId)
	}
	defer o.snap.Close()
	st = proto.Clone(o.state).(*rpcpb.RangeState)
	st.StreamId = 0
	out, err := encodeSnapshotHeader(st)
	if err != nil {
		return nil, err
	}
	_, _, err = streamPairs(o, func(chunk []byte) error { out = append(out, chunk...); return nil })
	return out, err
}

// sendSnapshot streams the snapshot of MsgSnap rm to its node. It runs on
// a goroutine of its own (transport.sendSnapshotAsync).
func (n *Node) sendSnapshot(ctx context.Context, rm *rpcpb.RaftMessage) error {
	var m raftpb.Message
	if err := m.Unmarshal(rm.Message); err != nil {
		return err
	}
	st, _, err := snapshotState(m.Snapshot.Data)
	if err != nil {
		return err
	}
	o := n.snapshots().take(st.StreamId)
	if o == nil {
		return fmt.Errorf("kvserver: snapshot of r%d to n%d: its engine snapshot expired", rm.RangeId, rm.ToNodeId)
	}
	defer o.snap.Close()
	select {
	case n.snapshotSend <- struct{}{}:
		defer func() { <-n.snapshotSend }()
	default:
		return fmt.Errorf("kvserver: snapshot of r%d to n%d: n%d sends %d snapshots already", rm.RangeId, rm.ToNodeId, n.NodeID(), SnapshotStreamsMax)
	}
	addr := n.nodeAddress(rm.ToNodeId)
	if addr == "" {
		return fmt.Errorf("kvserver: no address for node n%d", rm.ToNodeId)
	}
	conn, err := n.conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A watchdog cancels the stream when one Send (or the final answer)
	// outlasts SnapshotSendTimeout: flow control blocks a Send while the
	// receiver does not read.
	watchdog := time.AfterFunc(SnapshotSendTimeout, cancel)
	defer watchdog.Stop()
	stream, err := rpcpb.NewSnapshotsClient(conn).Send(ctx)
	if err != nil {
		return err
	}
	send := func(c *rpcpb.SnapshotChunk) error {
		watchdog.Reset(SnapshotSendTimeout)
		return stream.Send(c)
	}
	start := time.Now()
	if err := send(&rpcpb.SnapshotChunk{Header: rm}); err != nil {
		return snapshotStreamErr(stream, err)
	}
	var bytes int64
	count, crc, err := streamPairs(o, func(chunk []byte) error {
		bytes += int64(len(chunk))
		return send(&rpcpb.SnapshotChunk{Pairs: chunk})
	})
	if err != nil {
		return snapshotStreamErr(stream, err)
	}
	if err := send(&rpcpb.SnapshotChunk{Final: true, PairCount: count, Crc32C: crc}); err != nil {
		return snapshotStreamErr(stream, err)
	}
	watchdog.Reset(SnapshotSendTimeout)
	if _, err := stream.CloseAndRecv(); err != nil {
		return err
	}
	n.log.Info("snapshot sent", "range", rm.RangeId, "to", fmt.Sprintf("n%d", rm.ToNodeId),
		"index", m.Snapshot.Metadata.Index, "pairs", count, "bytes", bytes, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// snapshotStreamErr returns the receiver's error for a stream whose Send
// failed (io.EOF: the receiver ended it and its answer says why).
func snapshotStreamErr(stream rpcpb.Snapshots_SendClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.CloseAndRecv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// snapshotsService receives snapshot streams.
type snapshotsService struct {
	rpcpb.UnimplementedSnapshotsServer
	n *Node
}

// Send implements rpcpb.SnapshotsServer.
func (s *snapshotsService) Send(stream rpcpb.Snapshots_SendServer) error {
	n := s.n
	select {
	case n.snapshotRecv <- struct{}{}:
		defer func() { <-n.snapshotRecv }()
	default:
		return status.Errorf(codes.ResourceExhausted, "kvserver: n%d receives %d snapshots already", n.NodeID(), SnapshotStreamsMax)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	rm := first.Header
	if rm == nil {
		return status.Error(codes.InvalidArgument, "kvserver: snapshot stream without a header")
	}
	var m raftpb.Message
	if err := m.Unmarshal(rm.Message); err != nil || m.Type != raftpb.MsgSnap {
		return status.Error(codes.InvalidArgument, "kvserver: snapshot stream whose header is not a MsgSnap")
	}
	st, _, err := snapshotState(m.Snapshot.Data)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	path, size, err := n.stageSnapshot(stream, rm, &m, first)
	if err != nil {
		n.log.Warn("snapshot refused", "range", rm.RangeId, "from", fmt.Sprintf("n%d", m.From), "err", err)
		return err
	}
	st.StreamId, st.StagedFile, st.StagedBytes = 0, path, uint64(size)
	if m.Snapshot.Data, err = encodeSnapshotHeader(st); err != nil {
		_ = os.Remove(path)
		return err
	}
	local := proto.Clone(rm).(*rpcpb.RaftMessage)
	if local.Message, err = m.Marshal(); err != nil {
		_ = os.Remove(path)
		return err
	}
	n.log.Info("snapshot received", "range", rm.RangeId, "from", fmt.Sprintf("n%d", m.From),
		"index", m.Snapshot.Metadata.Index, "bytes", size)
	if err := n.receiveRaft(local); err != nil {
		_ = os.Remove(path)
		return err
	}
	return stream.SendAndClose(&rpcpb.SnapshotResponse{})
}

// stageSnapshot writes the stream's pairs to a file in the snapshots
// directory and returns its path and size, after checking the header as
// receiveRaft would and the pairs against the final chunk.
func (n *Node) stageSnapshot(stream rpcpb.Snapshots_SendServer, rm *rpcpb.RaftMessage, m *raftpb.Message, first *rpcpb.SnapshotChunk) (path string, size int64, err error) {
	if err := n.admitSnapshot(rm, m); err != nil {
		return "", 0, err
	}
	dir := n.snapshotDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("r%d-i%d-*.snap", rm.RangeId, m.Snapshot.Metadata.Index))
	if err != nil {
		return "", 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 256<<10)
	var count uint64
	var crc uint32
	c := first
	for {
		if len(c.Pairs) > 0 {
			k, err := countPairs(c.Pairs)
			if err != nil {
				return "", 0, status.Errorf(codes.DataLoss, "kvserver: snapshot of r%d: %v", rm.RangeId, err)
			}
			count += k
			crc = crc32.Update(crc, crcTable, c.Pairs)
			if _, err := w.Write(c.Pairs); err != nil {
				return "", 0, err
			}
			size += int64(len(c.Pairs))
			if n.disk != nil && n.disk.low.Load() {
				return "", 0, status.Errorf(codes.ResourceExhausted, "kvserver: snapshot for r%d refused on n%d: out of disk", rm.RangeId, n.NodeID())
			}
		}
		if c.Final {
			if c.PairCount != count || c.Crc32C != crc {
				return "", 0, status.Errorf(codes.DataLoss, "kvserver: snapshot of r%d: received %d pairs (crc %08x), sender sent %d (crc %08x)",
					rm.RangeId, count, crc, c.PairCount, c.Crc32C)
			}
			break
		}
		if c, err = stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Errorf(codes.DataLoss, "kvserver: snapshot of r%d cut short after %d bytes", rm.RangeId, size)
			}
			return "", 0, err
		}
	}
	if err := w.Flush(); err != nil {
		return "", 0, err
	}
	return f.Name(), size, nil
}

// countPairs returns the number of whole pairs in b, or an error if b
// does not hold whole pairs.
func countPairs(b []byte) (uint64, error) {
	var n uint64
	for len(b) > 0 {
		var err error
		if _, b, err = nextChunk(b); err != nil {
			return 0, err
		}
		if _, b, err = nextChunk(b); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// snapshotDir is where incoming snapshots are staged.
func (n *Node) snapshotDir() string { return filepath.Join(n.cfg.StoreDir, "snapshots") }

// cleanSnapshots removes staged snapshots and closes engine snapshots
// that will not be used: at start, every staged file; later, the files of
// ranges this node no longer holds or whose replica has applied past the
// snapshot's index (it was applied, or Raft refused it as stale), and the
// engine snapshots never streamed within SnapshotStreamTTL.
func (n *Node) cleanSnapshots(all bool) {
	now := time.Now()
	if all {
		n.snapshots().expire(time.Time{})
	} else {
		n.snapshots().expire(now.Add(-SnapshotStreamTTL))
	}
	entries, err := os.ReadDir(n.snapshotDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(n.snapshotDir(), e.Name())
		if !all {
			rangeID, index, ok := parseStagedName(e.Name())
			if ok {
				rr := n.replica(rangeID)
				if rr != nil && rr.r.Status().Applied < index {
					continue
				}
			}
			if info, err := e.Info(); err != nil || now.Sub(info.ModTime()) < SnapshotStreamTTL {
				continue
			}
		}
		_ = os.Remove(path)
	}
}

// parseStagedName parses "r<range>-i<index>-<random>.snap".
func parseStagedName(name string) (rangeID, index uint64, ok bool) {
	parts := strings.SplitN(strings.TrimSuffix(name, ".snap"), "-", 3)
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "r") || !strings.HasPrefix(parts[1], "i") {
		return 0, 0, false
	}
	r, err1 := strconv.ParseUint(parts[0][1:], 10, 64)
	i, err2 := strconv.ParseUint(parts[1][1:], 10, 64)
	return r, i, err1 == nil && err2 == nil
}

// pairSource yields a snapshot's pairs, inline or from a staged file.
type pairSource struct {
	inline []byte
	r      *bufio.Reader
	f      *os.File
}

func openPairs(st *rpcpb.RangeState, rest []byte) (*pairSource, error) {
	if st.StreamId != 0 {
		return nil, fmt.Errorf("kvserver: snapshot of r%d has not been received (stream %d): %w", st.Range.RangeId, st.StreamId, storage.ErrCorruption)
	}
	if st.StagedFile == "" {
		return &pairSource{inline: rest}, nil
	}
	f, err := os.Open(st.StagedFile)
	if err != nil {
		return nil, fmt.Errorf("kvserver: staged snapshot of r%d: %w", st.Range.RangeId, err)
	}
	return &pairSource{r: bufio.NewReaderSize(f, 256<<10), f: f}, nil
}

// next returns the next pair (fresh slices), or io.EOF after the last.
func (p *pairSource) next() (k, v []byte, err error) {
	if p.r == nil {
		if len(p.inline) == 0 {
			return nil, nil, io.EOF
		}
		if k, p.inline, err = nextChunk(p.inline); err != nil {
			return nil, nil, err
		}
		if v, p.inline, err = nextChunk(p.inline); err != nil {
			return nil, nil, err
		}
		return k, v, nil
	}
	if k, err = p.readChunk(); err != nil {
		return nil, nil, err
	}
	if v, err = p.readChunk(); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("kvserver: staged snapshot %s: truncated: %w", p.f.Name(), storage.ErrCorruption)
		}
		return nil, nil, err
	}
	return k, v, nil
}

func (p *pairSource) readChunk() ([]byte, error) {
	l, err := binary.ReadUvarint(p.r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("kvserver: staged snapshot %s: %v: %w", p.f.Name(), err, storage.ErrCorruption)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(p.r, b); err != nil {
		return nil, fmt.Errorf("kvserver: staged snapshot %s: %v: %w", p.f.Name(), err, storage.ErrCorruption)
	}
	return b, nil
}

// close closes and removes the staged file, if any.
func (p *pairSource) close() {
	if p.f != nil {
		_ = p.f.Close()
		_ = os.Remove(p.f.Name())
	}
}

// applyPairs clears the range's span and writes the snapshot's pairs:
// into b for an inline or small snapshot; otherwise in batches of at most
// about SnapshotApplyBatchBytes committed on their own, after a synced
// batch with the marker and the clearing, the marker being removed in b
// (see the file comment).
func (s *rangeSM) applyPairs(b *storage.Batch, st *rpcpb.RangeState, src *pairSource) error {
	desc := st.Range
	if st.StagedBytes <= uint64(SnapshotApplyBatchBytes) {
		if err := mvcc.ClearSpan(b, desc.StartKey, desc.EndKey); err != nil {
			return err
		}
		_, err := copyPairs(b, src, 0)
		return err
	}
	eng := s.n.Engine()
	marker := snapshotMarkerKey(desc.RangeId)
	span, err := proto.Marshal(&rpcpb.Span{Start: desc.StartKey, End: desc.EndKey})
	if err != nil {
		return err
	}
	mb := eng.NewWriteBatch()
	defer mb.Close()
	if err := mb.Set(marker, span); err != nil {
		return err
	}
	if err := mvcc.ClearSpan(mb, desc.StartKey, desc.EndKey); err != nil {
		return err
	}
	if err := mb.Commit(true); err != nil {
		return err
	}
	for done := false; !done; {
		sub := eng.NewWriteBatch()
		done, err = copyPairs(sub, src, SnapshotApplyBatchBytes)
		if err == nil {
			err = sub.Commit(false)
		}
		sub.Close()
		if err != nil {
			return err
		}
	}
	return b.Delete(marker)
}

// copyPairs writes src's pairs into b until b passes limit (0: no limit)
// and says whether it wrote the last one.
func copyPairs(b *storage.Batch, src *pairSource, limit int) (done bool, err error) {
	for limit == 0 || b.Len() < limit {
		k, v, err := src.next()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if err := b.Set(k, v); err != nil {
			return false, err
		}
	}
	return false, nil
}

// recoverSnapshotApplies resets to uninitialized every replica whose
// snapshot was being applied in several batches when the node stopped
// (its marker is present): its span is cleared, its range-local state
// removed but for its Raft term and vote (with the commit index reset, as
// its log is gone), and it is no longer registered. Its leader sends it a
// snapshot again.
func recoverSnapshotApplies(eng *storage.Engine, log interface{ Warn(string, ...any) }) error {
	lo := storage.NodeLocalKey("snapshot-applying/")
	hi := storage.NodeLocalKey("snapshot-applying0")
	it, err := eng.NewIter(lo, hi)
	if err != nil {
		return err
	}
	type marker struct {
		rangeID uint64
		span    *rpcpb.Span
	}
	var markers []marker
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.Value()
		if err != nil {
			_ = it.Close()
			return err
		}
		sp := &rpcpb.Span{}
		if len(k) != len(lo)+8 || proto.Unmarshal(v, sp) != nil {
			_ = it.Close()
			return fmt.Errorf("kvserver: damaged snapshot marker %x: %w", k, storage.ErrCorruption)
		}
		markers = append(markers, marker{binary.BigEndian.Uint64(k[len(lo):]), sp})
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, mk := range markers {
		b := eng.NewWriteBatch()
		if err := mvcc.ClearSpan(b, mk.span.Start, mk.span.End); err != nil {
			return err
		}
		hs := raftpb.HardState{}
		if v, err := eng.Get(storage.RangeLocalKey(mk.rangeID, storage.SuffixHardState)); err == nil {
			if err := hs.Unmarshal(v); err != nil {
				return fmt.Errorf("kvserver: r%d hard state: %v: %w", mk.rangeID, err, storage.ErrCorruption)
			}
		} else if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		_ = b.DeleteRange(storage.RangeLocalKey(mk.rangeID, 0), storage.RangeLocalKey(mk.rangeID+1, 0))
		hs.Commit = 0
		hb, err := hs.Marshal()
		if err != nil {
			return err
		}
		_ = b.Set(storage.RangeLocalKey(mk.rangeID, storage.SuffixHardState), hb)
		_ = b.Delete(registryKey(mk.rangeID))
		_ = b.Delete(snapshotMarkerKey(mk.rangeID))
		if err := b.Commit(true); err != nil {
			return err
		}
		b.Close()
		log.Warn("replica reset to uninitialized: the node stopped while it applied a snapshot; its leader will send one again",
			"range", mk.rangeID)
	}
	return nil
}
