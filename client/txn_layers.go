package client

import (
	"context"
	"fmt"
	"strings"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// A transaction's coordinator is a stack of layers, each with one concern
// and its own state, modelled on CockroachDB's TxnCoordSender and its
// interceptors. Txn (txn.go) sits on top: it checks arguments, keeps the
// transaction's state (pending, committing, decided), its write set and its
// poison error, and hands the cleanup to the intent resolver. Every
// operation then goes down the stack as a txnReq, and every layer either
// handles it, passes it on, or sends requests of its own to the layer
// below. From the top:
//
//  1. txnHeartbeater (heartbeat.go): before the first write, starts
//     keeping the transaction alive (writing the heartbeat record at once
//     only if the transaction is already old); after the decision, stops.
//     Top, because no write may reach the cluster before the transaction
//     is provably alive to a reader, and the heartbeat must run until the
//     layers below have finished committing.
//  2. txnSeqNumAllocator (txn_seq.go): numbers the writes, so that the
//     pipeliner can tell which of two writes to one key was issued last.
//  3. txnPipeliner (txn_pipeliner.go): sends writes with async consensus
//     and tracks them in flight; proves an in-flight write before a later
//     read or write of its key (the pipeline stall), and every in-flight
//     write before passing Commit on. Above the committer, so that the
//     commit timestamp is taken after every write is proven: then each
//     intent is applied before its commit_ts exists (docs/design-notes.md,
//     "Reads, and why a read at a timestamp blocks no later write").
//  4. txnCommitter (txn_commit.go): the commit point. Takes commit_ts,
//     asks for the refresh to it, writes the status with put-unless-exists,
//     and settles an unknown outcome by looking the status up. Rollback's
//     "aborted" is written here too.
//  5. txnSpanRefresher (txn_refresh.go): records the keys and spans read
//     (serializable only) and answers the committer's refresh request by
//     sending them all to be checked over (start_ts, commit_ts].
//  6. txnWire (txn_wire.go), the bottom: turns requests into RPCs through
//     the DB's sender, resolving other transactions' intents it meets and
//     mapping server outcomes to typed errors.
//
// Layers talk only through txnLayer, so each is tested step by step
// against a scripted fake of the layer below (txn_layers_test.go and
// testdata/).
//
// Set aside: an interface with one method per operation, each layer
// embedding the one below so that pass-through is implicit. It reads well,
// but the step tests want one place that sees every request a layer sends
// down, and parallel commits and 1PC will add request kinds that pass
// through most layers unchanged.

// txnLayer is one layer of the coordinator. send handles r or passes it
// down. It may be called concurrently while the transaction is pending
// (operations of one transaction may run on several goroutines); Txn sends
// opCommit or opAbort alone, after every operation has returned, and after
// them only an opAbort (when the commit did not succeed).
type txnLayer interface {
	send(ctx context.Context, r *txnReq) (*txnResp, error)
}

// txnOp is the kind of a txnReq.
type txnOp int

const (
	// Operations of the transaction, sent by Txn.
	opGet txnOp = iota + 1
	opScan
	opWrite
	opCommit
	opAbort
	// Requests layers send to the layers below.
	opProve     // the pipeliner: are these in-flight writes in place?
	opTimestamp // the committer: a commit timestamp
	opRefresh   // the committer: check reads over (start_ts, ts]
	opPutStatus // the committer: put-unless-exists of the status ts
	opGetStatus // the committer: read the status
	// One-phase commit (txn_onepc.go).
	opCommitOnePC // Txn: commit with these writes, in one proposal if they fit one range
	opOnePC       // the committer: the CommitOnePC request (writes; spans from the refresher)
	opQueryOnePC  // the committer: settle a lost CommitOnePC reply (key: the first write)
	// Parallel commits (txn_commit.go, recovery.go).
	opPutStaging // the committer: put-unless-exists of STAGING (ts; proofs: the writes)
	opRecover    // the committer: recover our own STAGING record (ts; proofs: the writes)
	// Recovery (recovery.go) to dbRecovery: RecoverIntent of each write.
	opRecoverIntents
	// 2pc-locking (txn_twopc.go): the first phase (writes; keys: the
	// keys read with a lock) and the second (ts: the decision; keys:
	// every key written or read).
	opPrepare
	opResolveKeys
)

var opNames = [...]string{"?", "get", "scan", "write", "commit", "abort", "prove", "timestamp", "refresh", "put-status", "get-status", "commit-1pc", "1pc", "query-1pc", "put-staging", "recover", "recover-intents", "prepare", "resolve-keys"}

func (o txnOp) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("txnOp(%d)", int(o))
}

// txnReq is one request to a layer. Which fields count depends on op.
type txnReq struct {
	op txnOp
	// key: get, write (logical key); scan: the start. end, limit: scan.
	key   []byte
	end   []byte
	limit int
	// value, del: write.
	value []byte
	del   bool
	// seq: write, set by the sequence number layer (1, 2, ...).
	seq uint64
	// async: write, set by the pipeliner: send with async consensus.
	async bool
	// proofs: prove; commit (with parallel commits: the writes in flight,
	// set by the pipeliner); put-staging and recover (the staged writes).
	proofs []inFlightWrite
	// spans: refresh, set by the refresher.
	spans []*rpcpb.Span
	// ts: refresh (the commit timestamp to refresh to); put-status (the
	// status to write: a commit timestamp, or txnstatus.Aborted).
	ts uint64
	// writes: commit-1pc, 1pc, prepare (logical keys, in order, each key
	// once).
	writes []Write
	// lock: get, sent by 2pc-locking's coordinator: take a shared lock
	// and read the latest committed value.
	lock bool
	// keys: prepare (the keys read with a lock), resolve-keys.
	keys [][]byte
}

// String is the request as step tests print it.
func (r *txnReq) String() string {
	var b strings.Builder
	b.WriteString(r.op.String())
	switch r.op {
	case opGet:
		fmt.Fprintf(&b, " %s", printable(r.key))
		if r.lock {
			b.WriteString(" lock")
		}
	case opPrepare:
		for _, w := range r.writes {
			if w.Delete {
				fmt.Fprintf(&b, " %s=<delete>", printable(w.Key))
			} else {
				fmt.Fprintf(&b, " %s=%s", printable(w.Key), printable(w.Value))
			}
		}
		for _, k := range r.keys {
			fmt.Fprintf(&b, " read=%s", printable(k))
		}
	case opResolveKeys:
		if r.ts == txnstatus.Aborted {
			b.WriteString(" aborted")
		} else {
			fmt.Fprintf(&b, " at %d", r.ts)
		}
		for _, k := range r.keys {
			fmt.Fprintf(&b, " %s", printable(k))
		}
	case opScan:
		fmt.Fprintf(&b, " [%s, %s)", printable(r.key), printable(r.end))
		if r.limit > 0 {
			fmt.Fprintf(&b, " limit=%d", r.limit)
		}
	case opWrite:
		if r.del {
			fmt.Fprintf(&b, " %s=<delete>", printable(r.key))
		} else {
			fmt.Fprintf(&b, " %s=%s", printable(r.key), printable(r.value))
		}
		if r.seq != 0 {
			fmt.Fprintf(&b, " seq=%d", r.seq)
		}
		if r.async {
			b.WriteString(" async")
		}
	case opProve, opCommit, opRecoverIntents:
		for _, p := range r.proofs {
			fmt.Fprintf(&b, " %s", p)
		}
	case opPutStaging, opRecover:
		fmt.Fprintf(&b, " at %d", r.ts)
		for _, p := range r.proofs {
			fmt.Fprintf(&b, " %s", p)
		}
	case opRefresh:
		for _, sp := range r.spans {
			if len(sp.GetEnd()) == 0 {
				fmt.Fprintf(&b, " %s", printable(sp.GetStart()))
			} else {
				fmt.Fprintf(&b, " [%s, %s)", printable(sp.GetStart()), printable(sp.GetEnd()))
			}
		}
		fmt.Fprintf(&b, " to %d", r.ts)
	case opCommitOnePC, opOnePC:
		for _, w := range r.writes {
			if w.Delete {
				fmt.Fprintf(&b, " %s=<delete>", printable(w.Key))
			} else {
				fmt.Fprintf(&b, " %s=%s", printable(w.Key), printable(w.Value))
			}
		}
		if r.op == opOnePC {
			for _, sp := range r.spans {
				fmt.Fprintf(&b, " read=%s", printable(sp.GetStart()))
				if len(sp.GetEnd()) > 0 {
					fmt.Fprintf(&b, "-%s", printable(sp.GetEnd()))
				}
			}
		}
	case opQueryOnePC:
		fmt.Fprintf(&b, " %s", printable(r.key))
	case opPutStatus:
		if r.ts == txnstatus.Aborted {
			b.WriteString(" aborted")
		} else {
			fmt.Fprintf(&b, " committed at %d", r.ts)
		}
	}
	return b.String()
}

// txnResp is a layer's answer. Which fields count depends on the request.
type txnResp struct {
	// value, found: get. found: get-status (a record exists).
	value []byte
	found bool
	// kvs: scan.
	kvs []*rpcpb.KeyValue
	// proven: prove, one per proof in order: the write is in place.
	proven []bool
	// ts: timestamp; commit (the commit timestamp).
	ts uint64
	// won: put-status wrote our value (or found exactly it).
	won bool
	// d: put-status when not won (the decision that was there),
	// get-status when found, abort (the decision that holds).
	d decision
	// query-1pc: found (committed at ts), or prevented (never applies),
	// or neither (settled, unknown).
	prevented bool
	// implicit: commit: committed in parallel, its COMMITTED status not
	// yet recorded (the caller records it before resolving any intent).
	implicit bool
	// fenced: put-staging found a reader's FENCE (won is false).
	fenced bool
}

// printable returns k with its bytes outside printable ASCII escaped as
// \xNN, for step-test output and messages.
func printable(k []byte) string {
	var b strings.Builder
	for _, c := range k {
		if c >= 0x20 && c < 0x7f && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	return b.String()
}
