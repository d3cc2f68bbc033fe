package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Coalesced status writes (issue 10 item 2; the record's "Multinode
// Contention and Residues": "batching requests on the client side for each
// partition could be useful").
//
// Every put-unless-exists of this client (status and staging keys: commit
// points, aborts, fences) goes through statusWrites. Per range, at most one
// batch is in flight; cells that arrive meanwhile wait and leave together
// in the next one: one BatchRequest of many PlainPutUnlessExists cells,
// one Raft proposal, each cell evaluated on its own and keeping its own
// outcome (won, or the existing value). An idle range adds no delay: a
// cell that finds its range idle leaves at once (group commit, as the
// intent resolver batches cleanup).
//
// Why per range and not one queue for the client: a batch goes to one
// range's leaseholder; a single queue would make a commit on an idle
// status range wait behind a slow batch of another. Why not wait a little
// to fill batches: it would add latency at low load for no gain; under
// load, the batch in flight is the wait.
//
// Invariants: a cell is in at most one batch; a batch holds at most
// StatusBatchCellsMax cells; at most one flusher goroutine per range runs.
// If a cell's caller stops waiting (its context ends) after the cell was
// sent, the caller gets ErrAmbiguous: the cell may have been written.
// Cells of one batch that fail together (routing, ambiguity) all get that
// error, as the single request each used to be would have.

// StatusBatchCellsMax bounds the put-unless-exists cells of one coalesced
// batch (below keys.TxnKeysMax, the server's batch limit).
const StatusBatchCellsMax = 1000

// statusCell is one put-unless-exists waiting for its batch.
type statusCell struct {
	key, value []byte
	done       chan statusResult // buffered, 1
	// sent is set (under the queue's lock) once the cell left in a batch.
	sent bool
}

type statusResult struct {
	resp *rpcpb.PlainPutUnlessExistsResponse
	err  error
}

// statusWrites coalesces put-unless-exists cells per range.
type statusWrites struct {
	db *DB
	mu struct {
		sync.Mutex
		// queues by range ID. Invariant: a queue is in the map while its
		// flusher runs or it holds cells.
		queues map[uint64]*statusQueue
	}
	// batches and cells count the batches sent and their cells (tests).
	stats struct {
		sync.Mutex
		batches, cells int
	}
}

type statusQueue struct {
	cells []*statusCell
	// flushing: a flusher goroutine owns the queue's sending.
	flushing bool
}

func newStatusWrites(db *DB) *statusWrites {
	w := &statusWrites{db: db}
	w.mu.queues = map[uint64]*statusQueue{}
	return w
}

// put writes value at the plain key unless it has one: the response of
// its PlainPutUnlessExists cell.
func (w *statusWrites) put(ctx context.Context, key, value []byte) (*rpcpb.PlainPutUnlessExistsResponse, error) {
	e, err := w.db.sender.lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	rid := e.desc.GetRangeId()
	c := &statusCell{key: key, value: value, done: make(chan statusResult, 1)}
	// The batch is sent on the DB's context, so the caller's wait for it
	// (a consensus round) is counted here, on the caller's (RoundCounter).
	defer waitForRound(ctx, true)()
	w.mu.Lock()
	q := w.mu.queues[rid]
	if q == nil {
		q = &statusQueue{}
		w.mu.queues[rid] = q
	}
	q.cells = append(q.cells, c)
	if !q.flushing {
		q.flushing = true
		go w.flush(rid, q)
	}
	w.mu.Unlock()
	select {
	case r := <-c.done:
		return r.resp, r.err
	case <-ctx.Done():
	}
	w.mu.Lock()
	sent := c.sent
	if !sent {
		for i, x := range q.cells {
			if x == c {
				q.cells = append(q.cells[:i], q.cells[i+1:]...)
				break
			}
		}
	}
	w.mu.Unlock()
	if sent {
		select {
		case r := <-c.done: // it finished meanwhile
			return r.resp, r.err
		default:
		}
		return nil, fmt.Errorf("%w: put-unless-exists of %q: the caller stopped waiting after it was sent: %w", ErrAmbiguous, key, ctx.Err())
	}
	return nil, fmt.Errorf("%w: put-unless-exists of %q not sent: %w", ErrUnavailable, key, ctx.Err())
}

// flush sends the queue's cells in batches until it is empty, then
// removes it.
func (w *statusWrites) flush(rid uint64, q *statusQueue) {
	for {
		w.mu.Lock()
		if len(q.cells) == 0 {
			q.flushing = false
			delete(w.mu.queues, rid)
			w.mu.Unlock()
			return
		}
		n := min(len(q.cells), StatusBatchCellsMax)
		batch := q.cells[:n:n]
		q.cells = append([]*statusCell(nil), q.cells[n:]...)
		for _, c := range batch {
			c.sent = true
		}
		w.mu.Unlock()
		w.send(batch)
	}
}

// send sends one batch (sendPoints regroups it should the range have
// split) and hands each cell its own response.
func (w *statusWrites) send(batch []*statusCell) {
	reqs := make([]*rpcpb.RequestUnion, len(batch))
	for i, c := range batch {
		reqs[i] = &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{
			PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{Key: c.key, Value: c.value}}}
	}
	w.stats.Lock()
	w.stats.batches++
	w.stats.cells += len(batch)
	w.stats.Unlock()
	resps, err := w.db.sender.sendPoints(w.db.ctx, true, reqs)
	for i, c := range batch {
		if err != nil {
			c.done <- statusResult{err: err}
			continue
		}
		p := resps[i].GetPlainPutUnlessExists()
		if p == nil {
			c.done <- statusResult{err: fmt.Errorf("%w: put-unless-exists answered with %T", ErrInternal, resps[i].GetValue())}
			continue
		}
		c.done <- statusResult{resp: p}
	}
}

// counts returns the batches sent and their cells.
func (w *statusWrites) counts() (batches, cells int) {
	w.stats.Lock()
	defer w.stats.Unlock()
	return w.stats.batches, w.stats.cells
}
