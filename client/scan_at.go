package client

import (
	"context"
	"errors"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// ScanAt is Scan at a given timestamp rather than a fresh one: the keys of
// [start, end) as of ts, at most limit of them (0: all, up to
// Options.ScanKeysMax). Intents met are resolved as a transaction reading
// at ts would (an intent of a transaction committed at or below ts is
// visible; a pending one is waited for, up to Options.IntentWaitMax, then
// ErrRetryable). Successive calls at one ts read one consistent snapshot,
// which is what backup does page by page. start may be one byte longer
// than keys.KeyBytesMax (to resume after the longest key k at k+0x00).
//
// ts must be a timestamp the oracle has already handed out (DB.Timestamp,
// or a transaction's): only then can no write still commit at or below it
// (docs/design-notes.md, "Reads, and why a read at a timestamp blocks no
// later write below it"). A ts below a range's GC threshold (older than
// the cluster's GC TTL) fails with ErrInvalidArgument: the versions it
// needs may be gone.
func (db *DB) ScanAt(ctx context.Context, start, end []byte, ts uint64, limit int) ([]KeyValue, error) {
	if ts == 0 {
		return nil, invalidArgf("ScanAt needs a timestamp (0 is none)")
	}
	// start may be one byte longer than a key, so that a caller resumes
	// after the longest key k with k+0x00.
	if len(start) > keys.KeyBytesMax+1 {
		return nil, invalidArgf("scan start is %d bytes, above the limit KeyBytesMax+1=%d", len(start), keys.KeyBytesMax+1)
	}
	ls, le, err := db.checkScan(nil, end, limit)
	if err != nil {
		return nil, err
	}
	if ls = keys.UserKey(start); string(ls) > string(le) {
		return nil, invalidArgf("scan start %q is after its end %q", start, end)
	}
	kvs, err := db.sender.scan(ctx, ls, le, ts, 0, limit, db.opts.ScanKeysMax, db.opts.IntentRoundsMax,
		func(ctx context.Context, intents []*rpcpb.Intent) error {
			return db.resolveForeign(ctx, intents, waiter{})
		})
	if err != nil {
		err = publicError(err)
		// A scan raises no read conflict (only a refresh or a commit
		// does), so a ReasonReadConflict here is TS_BELOW_GC_THRESHOLD
		// (errorFromPB maps both to it): retryable for a transaction,
		// which restarts at a fresh timestamp, but never for a fixed ts.
		var re *RetryableError
		if errors.As(err, &re) && re.Reason == ReasonReadConflict {
			return nil, invalidArgf("scan at %d: %s", ts, re.Msg)
		}
		return nil, err
	}
	return userKVs(kvs)
}
