package mvcc

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidArgument marks a call with arguments the contract forbids (a
// zero timestamp where one is required, a commit timestamp below the start
// timestamp, an inverted span). The caller maps it to INVALID_ARGUMENT; it
// is never retried.
var ErrInvalidArgument = errors.New("mvcc: invalid argument")

// ErrInvariant marks stored data that the conflict rules should have made
// impossible, such as a committed version at or above the commit timestamp
// of an intent being resolved. It is an error and not a panic because the
// functions of this package run at Raft apply: a panic there would crash
// every replica deterministically, and again on every restart.
var ErrInvariant = errors.New("mvcc: invariant violated")

// TxnMeta identifies the transaction that wrote an intent.
type TxnMeta struct {
	// StartTs is the transaction's start_ts; never 0 for a stored intent.
	StartTs Timestamp
	// HeartbeatKey is the logical key of the transaction's heartbeat
	// record, so that a reader that meets the intent can judge whether
	// its writer is still alive.
	HeartbeatKey []byte
}

// Intent names a transaction's provisional write at Key.
type Intent struct {
	Key []byte
	Txn TxnMeta
}

func (i Intent) String() string { return fmt.Sprintf("%q@txn%d", i.Key, i.Txn.StartTs) }

// WriteConflictError (WRITE_CONFLICT) is returned by PutIntent and
// PutCommitted when a write may not proceed: either a committed version at
// ExistingTs is in the way (Intent nil), or another transaction's intent is
// (Intent set, ExistingTs 0). The transaction retries with a new start_ts.
type WriteConflictError struct {
	Key        []byte
	ExistingTs Timestamp
	Intent     *Intent
}

func (e *WriteConflictError) Error() string {
	if e.Intent != nil {
		return fmt.Sprintf("mvcc: write conflict at %q: intent of txn %d", e.Key, e.Intent.Txn.StartTs)
	}
	return fmt.Sprintf("mvcc: write conflict at %q: committed version at ts %d", e.Key, e.ExistingTs)
}

// IntentError (INTENT_FOUND) is returned by reads, and by PutCommitted,
// that met intents of other transactions. Intents is never empty and is in
// key order. The caller resolves them by their status and retries.
type IntentError struct {
	Intents []Intent
}

func (e *IntentError) Error() string {
	var b strings.Builder
	b.WriteString("mvcc: intents found:")
	for i, in := range e.Intents {
		if i == intentsShownMax {
			fmt.Fprintf(&b, " ... (%d more)", len(e.Intents)-i)
			break
		}
		b.WriteString(" ")
		b.WriteString(in.String())
	}
	return b.String()
}

// intentsShownMax bounds the intents named in an IntentError's message.
const intentsShownMax = 8

// ReadConflictError (READ_CONFLICT) is returned by Refresh: Key has a
// committed version at Ts in the refreshed interval (Intent nil), or an
// intent of another transaction (Intent set, Ts 0).
type ReadConflictError struct {
	Key    []byte
	Ts     Timestamp
	Intent *Intent
}

func (e *ReadConflictError) Error() string {
	if e.Intent != nil {
		return fmt.Sprintf("mvcc: read conflict at %q: intent of txn %d", e.Key, e.Intent.Txn.StartTs)
	}
	return fmt.Sprintf("mvcc: read conflict at %q: committed version at ts %d", e.Key, e.Ts)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
