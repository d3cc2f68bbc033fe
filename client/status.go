package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// The status table maps a transaction's start_ts to its commit_ts or
// "aborted" (see internal/txnstatus). A transaction commits exactly when
// put-unless-exists of its committed value succeeds (I1); anyone may
// instead win the race with put-unless-exists of the aborted value.

// statusKey is the logical key of the status record of startTs.
func (db *DB) statusKey(startTs uint64) []byte { return keys.StatusKey(db.encOf(startTs).Key(startTs)) }

// statusValue encodes a decision: commitTs, or txnstatus.Aborted.
func (db *DB) statusValue(startTs, commitTs uint64) ([]byte, error) {
	v, err := db.encOf(startTs).EncodeValue(startTs, commitTs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: status of %d: %w", ErrInternal, errBadStatus, startTs, err)
	}
	return v, nil
}

// errBadStatus marks (beside ErrInternal) a status value that does not
// encode, or a status record that does not decode (corruption). The
// committer does not look such a record up: a lookup would find the same.
var errBadStatus = errors.New("bad status value")

// decodeStatus decodes a status record. A record that does not decode is
// corruption (ErrInternal and errBadStatus), never "pending" or
// "aborted" (txnstatus contract 4).
func (db *DB) decodeStatus(startTs uint64, v []byte) (commitTs uint64, aborted bool, err error) {
	commitTs, aborted, err = db.encOf(startTs).DecodeValue(startTs, v)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w: status record of %d: %w", ErrInternal, errBadStatus, startTs, err)
	}
	return commitTs, aborted, nil
}

// plainGet reads a plain key.
func (db *DB) plainGet(ctx context.Context, k []byte) (bool, []byte, error) {
	resp, err := db.sender.sendOne(ctx, false, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: k}}})
	if err != nil {
		return false, nil, err
	}
	g := resp.GetPlainGet()
	if g == nil {
		return false, nil, fmt.Errorf("%w: plain get answered with %T", ErrInternal, resp.GetValue())
	}
	return g.GetFound(), g.GetValue(), nil
}

// plainPut writes (or deletes) a plain key.
func (db *DB) plainPut(ctx context.Context, k, v []byte, del bool) error {
	_, err := db.sender.sendOne(ctx, true, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: k, Value: v, Delete: del}}})
	return err
}

// putUnlessExists writes v at plain key k unless k has a value; it
// returns whether it wrote, and otherwise the existing value.
//
// "Exists with exactly v" counts as success. The sender resends an
// ambiguous attempt, and the resend finds the first attempt's value; for
// the status table that is also right when someone else wrote it: a
// status key's committed value is only ever written by its own
// transaction, and two writers of "aborted" agree.
func (db *DB) putUnlessExists(ctx context.Context, k, v []byte) (bool, []byte, error) {
	// Coalesced with this client's other put-unless-exists cells on the
	// same range (status_writes.go).
	p, err := db.statusWrites.put(ctx, k, v)
	if err != nil {
		return false, nil, err
	}
	if p.GetSucceeded() || bytes.Equal(p.GetExisting(), v) {
		return true, nil, nil
	}
	return false, p.GetExisting(), nil
}

// decision is a transaction's outcome in the status table.
type decision struct {
	commitTs uint64 // txnstatus.Aborted (0) when aborted
}

func (d decision) aborted() bool { return d.commitTs == txnstatus.Aborted }

// abortTxn writes "aborted" for startTs unless a decision exists, and
// returns the decision that holds afterwards.
func (db *DB) abortTxn(ctx context.Context, startTs uint64) (decision, error) {
	v, err := db.statusValue(startTs, txnstatus.Aborted)
	if err != nil {
		return decision{}, err
	}
	ok, existing, err := db.putUnlessExists(ctx, db.statusKey(startTs), v)
	if err != nil {
		return decision{}, err
	}
	if ok {
		db.statuses.put(startTs, txnstatus.Aborted)
		return decision{commitTs: txnstatus.Aborted}, nil
	}
	c, _, err := db.decodeStatus(startTs, existing)
	if err != nil {
		return decision{}, err
	}
	db.statuses.put(startTs, c)
	return decision{commitTs: c}, nil
}
