package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// The error classes a caller can test with errors.Is. Every error this
// package returns wraps exactly one of them (or a context error, when the
// caller's context ended before anything was sent).
var (
	// ErrInvalidArgument: the request can never succeed as written (a key,
	// value or transaction over a limit, a finished transaction). The message
	// names the limit and the actual size. Never retried.
	ErrInvalidArgument = errors.New("canopy: invalid argument")
	// ErrRetryable: the transaction lost a conflict and was aborted (or, for a
	// single-key operation, gave up waiting for another transaction). Running
	// it again from the start, with a new start_ts, may succeed. DB.Txn does
	// that itself. The concrete type is *RetryableError.
	ErrRetryable = errors.New("canopy: retryable transaction conflict")
	// ErrAmbiguous: a write may or may not have taken effect, and the client
	// could not find out before its deadline or attempt limit. For DB.Txn and
	// Txn.Commit it means the status-table lookup itself could not complete:
	// the transaction is committed or aborted, and the caller cannot tell which.
	ErrAmbiguous = errors.New("canopy: ambiguous result")
	// ErrUnavailable: the cluster could not serve the request (no leader, no
	// reachable node, not bootstrapped) before the deadline or attempt limit.
	// Nothing was written; for a transaction, it did not commit.
	ErrUnavailable = errors.New("canopy: unavailable")
	// ErrInternal: the server reported an internal error, or answered against
	// the wire contract. Not retried; a bug to report.
	ErrInternal = errors.New("canopy: internal error")
	// ErrOutOfDisk: the leaseholder refused a write because the disk of its
	// store is nearly full. It always comes with ErrUnavailable: nothing
	// was written, and the write may be retried later; it succeeds once the
	// operator frees space (the node then accepts writes by itself) or the
	// lease moves to another node (a node low on disk hands its leases to
	// caught-up followers within a second). Reads are still served. Returned at
	// once: the sender does not spend its attempts on it.
	ErrOutOfDisk = errors.New("canopy: out of disk")
	// ErrPermission: a node refused the caller's credentials before doing
	// anything: no client certificate was presented (Options.TLS), or the
	// certificate's user may not make this request (administrative RPCs
	// and writes of the cluster's settings need the admin user, "root" by
	// default). Nothing was executed; never retried. A certificate the
	// cluster's CA did not sign fails the TLS handshake instead, which the
	// client sees as ErrUnavailable naming the handshake's error.
	ErrPermission = errors.New("canopy: permission denied")
)

// RetryReason says why a transaction must be retried.
type RetryReason int

const (
	// ReasonWriteTooOld: a write met a committed version newer than the
	// transaction's start_ts (WRITE_CONFLICT with existing_ts).
	ReasonWriteTooOld RetryReason = iota + 1
	// ReasonReadConflict: the serializable commit check found a read key or
	// span changed in (start_ts, commit_ts] (READ_CONFLICT).
	ReasonReadConflict
	// ReasonIntentPending: an intent of a live transaction (its heartbeat is
	// fresh) stayed in the way longer than the wait budget.
	ReasonIntentPending
	// ReasonAborted: the status table says the transaction is aborted: a
	// reader aborted it after its heartbeat expired, or an ambiguous commit
	// was resolved by writing "aborted".
	ReasonAborted
	// ReasonDeadlock: the transaction waited, at a leaseholder, in a cycle
	// of transactions waiting for each other's intents, and was the one
	// chosen to give way (the youngest).
	ReasonDeadlock
	// ReasonPipelinedWriteFailed: a write sent with pipelining (answered
	// once proposed, before it was replicated) was not found when the
	// transaction proved it, before a later read or write of its key or
	// before the commit point: its replication failed (the proposal was
	// dropped, or lost in a change of leader). The transaction did not
	// commit.
	ReasonPipelinedWriteFailed
)

func (r RetryReason) String() string {
	switch r {
	case ReasonWriteTooOld:
		return "write too old"
	case ReasonReadConflict:
		return "read conflict"
	case ReasonIntentPending:
		return "intent of a live transaction"
	case ReasonAborted:
		return "aborted"
	case ReasonDeadlock:
		return "deadlock victim"
	case ReasonPipelinedWriteFailed:
		return "pipelined write failed"
	}
	return fmt.Sprintf("RetryReason(%d)", int(r))
}

// RetryableError is the concrete type behind ErrRetryable.
type RetryableError struct {
	Reason RetryReason
	// Key is the logical key involved, if one is known.
	Key []byte
	// Ts is the timestamp involved: the existing version's (write too old), or
	// the other transaction's start_ts (intent pending).
	Ts  uint64
	Msg string
}

func (e *RetryableError) Error() string {
	s := "canopy: retryable transaction conflict: " + e.Reason.String()
	if e.Key != nil {
		s += fmt.Sprintf(" at key %q", e.Key)
	}
	if e.Ts != 0 {
		s += fmt.Sprintf(" (ts %d)", e.Ts)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is makes errors.Is(err, ErrRetryable) true.
func (e *RetryableError) Is(target error) bool { return target == ErrRetryable }

func invalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// kvError is a server error the sender does not handle itself: the
// protocol outcomes (WRITE_CONFLICT, INTENT_FOUND, READ_CONFLICT) that the
// transaction coordinator acts on. It never leaves the package: callers turn
// it into a typed error with publicError.
type kvError struct {
	pb *rpcpb.Error
}

func (e *kvError) Error() string {
	return fmt.Sprintf("canopy: server: %s: %s", e.pb.GetCode(), e.pb.GetMessage())
}

func asKVError(err error, code rpcpb.ErrorCode) (*rpcpb.Error, bool) {
	var ke *kvError
	if errors.As(err, &ke) && ke.pb.GetCode() == code {
		return ke.pb, true
	}
	return nil, false
}

// errorFromPB maps a server error code that is final for the sender to a
// typed error.
func errorFromPB(pb *rpcpb.Error) error {
	if rpcpb.IsOutOfDisk(pb) {
		return fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrOutOfDisk, strings.TrimPrefix(pb.GetMessage(), rpcpb.OutOfDiskPrefix))
	}
	switch pb.GetCode() {
	case rpcpb.ErrorCode_INVALID_ARGUMENT:
		return fmt.Errorf("%w: %s", ErrInvalidArgument, pb.GetMessage())
	case rpcpb.ErrorCode_UNAVAILABLE, rpcpb.ErrorCode_NOT_BOOTSTRAPPED,
		rpcpb.ErrorCode_NOT_LEASEHOLDER, rpcpb.ErrorCode_RANGE_NOT_FOUND,
		rpcpb.ErrorCode_RANGE_KEY_MISMATCH:
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, pb.GetCode(), pb.GetMessage())
	case rpcpb.ErrorCode_AMBIGUOUS:
		return fmt.Errorf("%w: %s", ErrAmbiguous, pb.GetMessage())
	case rpcpb.ErrorCode_WRITE_CONFLICT:
		return &RetryableError{Reason: ReasonWriteTooOld, Ts: pb.GetExistingTs(), Msg: pb.GetMessage()}
	case rpcpb.ErrorCode_READ_CONFLICT, rpcpb.ErrorCode_TS_BELOW_GC_THRESHOLD:
		return &RetryableError{Reason: ReasonReadConflict, Msg: pb.GetMessage()}
	case rpcpb.ErrorCode_INTENT_FOUND:
		return &RetryableError{Reason: ReasonIntentPending, Msg: pb.GetMessage()}
	case rpcpb.ErrorCode_DEADLOCK:
		return &RetryableError{Reason: ReasonDeadlock, Msg: pb.GetMessage()}
	case rpcpb.ErrorCode_PROTOCOL_NOT_RUN:
		return &ProtocolError{Msg: pb.GetMessage()}
	default:
		return fmt.Errorf("%w: %s: %s", ErrInternal, pb.GetCode(), pb.GetMessage())
	}
}

// publicError turns a kvError that escaped the coordinator's handling into
// a typed error; other errors pass through.
func publicError(err error) error {
	var ke *kvError
	if errors.As(err, &ke) {
		return errorFromPB(ke.pb)
	}
	return err
}

// ErrorClass names the class of an error returned by this package, for
// summaries and metrics: "retryable (attempts exhausted)", "ambiguous",
// "unavailable", "deadline", "invalid argument", "internal" or "other".
func ErrorClass(err error) string {
	switch {
	case errors.Is(err, ErrRetryable):
		return "retryable (attempts exhausted)"
	case errors.Is(err, ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "deadline"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid argument"
	case errors.Is(err, ErrInternal):
		return "internal"
	case errors.Is(err, ErrPermission):
		return "permission denied"
	}
	return "other"
}
