package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"google.golang.org/grpc"
)

// Options configures a DB. The zero value of every field means its
// default; EnsureDefaults fills them and Validate rejects contradictions.
//
// Durations are time.Duration rather than integers with a unit suffix: the
// type carries the unit, and callers write 5*time.Second.
type Options struct {
	// DialOptions are added after the defaults (transport security per
	// TLS, message size limits of keys.RequestBytesMax).
	DialOptions []grpc.DialOption
	// TLS, if set, is the client's TLS configuration: the cluster's CA as
	// RootCAs and the user's client certificate (LoadTLS reads them from
	// a certificates directory: ca.crt, client.USER.crt/key). Every connection is then mutual TLS, and a
	// node checks the server name against its certificate. nil: plaintext,
	// which only a node started with --insecure accepts.
	TLS *tls.Config

	// RPCTimeout bounds one attempt of one RPC. A write whose attempt times
	// out may have been applied: it is retried if idempotent and otherwise
	// reported as ambiguous. Default 10s.
	RPCTimeout time.Duration
	// LookupTimeout bounds one attempt of a request any node can answer
	// (ClusterInfo, range lookups): a node that does not answer within it,
	// stopped or cut off, is left for the next one. Default 2s.
	LookupTimeout time.Duration
	// ProbeAfter: an attempt still running after this long has its node
	// probed (gRPC health), and again every ProbeAfter; ProbeTimeout: a
	// probe without an answer in this long ends the attempt as if the
	// node were down (probe.go). Defaults 250 ms, and for ProbeTimeout
	// the cluster's election timeout, at least 500 ms and at most 5 s
	// (1 s until the first contact tells it; timing.go); a negative
	// ProbeAfter turns probing off. A stopped node is given up after at
	// most ProbeAfter + ProbeTimeout; only ProbeTimeout decides that a
	// node is silent, so a smaller ProbeAfter finds it sooner at the cost
	// of more probes of slow attempts, never of more attempts ended.
	ProbeAfter   time.Duration
	ProbeTimeout time.Duration
	// DialTimeout, if positive, bounds Open's first contact with the
	// cluster: if no address answers within it, Open fails at once with
	// ErrUnavailable ("cannot reach any node"), as etcd's clientv3 does.
	// 0: bounded only by ctx and SendAttemptsMax (about 25s when nothing
	// listens). The CLI sets it with --dial-timeout (default 2s).
	DialTimeout time.Duration
	// SendAttemptsMax bounds the attempts of one request to one range
	// (redirects, re-lookups, retries after UNAVAILABLE or a transport
	// error). Default 40, or with a derived SendBackoffMax as many as keep
	// the loop trying for about as long as 40 attempts at 1 s
	// (timing.go).
	SendAttemptsMax int
	// SendBackoffInitial and SendBackoffMax shape the exponential backoff
	// between routing attempts. Defaults 5ms, and for SendBackoffMax a
	// quarter of the cluster's election timeout, at least 50 ms and at
	// most 1 s (1 s until the first contact tells it; timing.go).
	SendBackoffInitial time.Duration
	SendBackoffMax     time.Duration

	// TxnAttemptsMax bounds how many times DB.Txn runs its closure. Default 20.
	TxnAttemptsMax int
	// TxnBackoffInitial and TxnBackoffMax shape the backoff between
	// transaction attempts. Defaults 5ms and 1s.
	TxnBackoffInitial time.Duration
	TxnBackoffMax     time.Duration

	// HeartbeatTTL is how long a transaction's heartbeat record keeps it
	// alive; it is refreshed every HeartbeatTTL/5. Others may abort a
	// transaction whose record expired. Default 5s.
	HeartbeatTTL time.Duration
	// TxnLifetimeMax stops the heartbeat of a transaction that has been
	// neither committed nor rolled back for this long (a leaked Txn), so
	// that others can abort it. Default 10 minutes.
	TxnLifetimeMax time.Duration

	// IntentWaitMax bounds how long an operation waits, in total, for an
	// older live transaction whose intent is in its way before giving up
	// with ErrRetryable. Default 2s.
	IntentWaitMax time.Duration
	// IntentWaitYoungerMax is the same budget when the waiting transaction
	// is younger than the intent's (larger start_ts) and has written
	// intents itself. It is short so that a cycle of waiting transactions
	// (a deadlock) breaks quickly: the younger one gives up (wait-die).
	// A transaction without intents can be in no cycle and waits
	// IntentWaitMax. Default 100ms.
	IntentWaitYoungerMax time.Duration
	// IntentWoundAfter: a transaction that waits this long for the intent
	// of a younger live transaction (larger start_ts) aborts it (wound-
	// wait) instead of waiting up to IntentWaitMax: the younger one's
	// record is written ABORTED with put-unless-exists, so either its
	// commit or the abort wins, never both, and it retries. Default 50ms.
	IntentWoundAfter time.Duration
	// IntentRoundsMax bounds how often one operation resolves intents and
	// retries. Default 16.
	IntentRoundsMax int

	// TxnKeysMax is the most keys one transaction may write. Default and
	// maximum keys.TxnKeysMax.
	TxnKeysMax int
	// ReadSpansMax is the most keys and spans one transaction may read (the
	// serializable commit check sends them all). Default 100,000.
	ReadSpansMax int
	// ScanKeysMax is the most keys one Scan returns; a Scan with limit 0
	// that would return more fails with ErrInvalidArgument. Default 100,000.
	ScanKeysMax int

	// TimestampBatchMax is the most timestamps one oracle RPC asks for.
	// Default 4096.
	TimestampBatchMax int

	// ResolveWorkers is the number of goroutines resolving intents after a
	// transaction's decision. Default 4.
	ResolveWorkers int
	// StatusScheduleExtension is how far past a start timestamp a client
	// extends the status encoding schedule when it must (status_schedule.go):
	// a change of encoding takes effect within this time. Each extension
	// writes one small record in range 1. Default 5 minutes.
	StatusScheduleExtension time.Duration
	// LeaveIntents: this client does not resolve the intents of its
	// decided transactions (a parallel commit's status is still recorded);
	// readers that meet them look the status up and resolve them. For the
	// status-table experiments (canopy bench status), which need intents of
	// committed transactions left in place.
	LeaveIntents bool
	// ResolveQueueMax bounds the decided transactions waiting for
	// resolution; a committing caller blocks (within its context) when it
	// is full. Default 1024.
	ResolveQueueMax int
	// ResolveBatchKeysMax is the most ResolveIntent requests in one batch.
	// Default 1000.
	ResolveBatchKeysMax int
	// StatusCacheEntriesMax bounds the decided transactions (final, so
	// never stale) whose status this client remembers, so that intents of
	// one transaction met again cost no status-table read. Default 65536
	// (about 2 MiB); negative disables the cache.
	StatusCacheEntriesMax int
	// StatusLookupCrossColumnMax (the record's CC) and
	// StatusLookupSingleQueryMax (SQ) shape batched status lookups within
	// one status range (txnstatus.PartitionForLoad): cells of columns with
	// fewer than CC cells are combined in requests of up to CC cells; a
	// column with at least CC cells gets requests of its own of up to SQ
	// cells. CC <= SQ <= keys.TxnKeysMax. Defaults 200 and 10,000: the
	// record's benchmark prints "CC = 50,000 and SQ = 200", which breaks
	// its own rule SQ >= CC (AtlasDB's defaults are CC 200, SQ 50,000);
	// SQ is capped here by the server's batch limit.
	StatusLookupCrossColumnMax int
	StatusLookupSingleQueryMax int
	// AbortTimeout bounds the status-table writes made on behalf of a
	// caller whose context may have ended (abort, ambiguous-commit lookup).
	// Default 5s.
	AbortTimeout time.Duration
	// CloseDrainMax bounds how long Close waits for queued intent
	// resolution. Default 5s.
	CloseDrainMax time.Duration

	// Clock returns the wall-clock time used for heartbeat expiries.
	// Default time.Now. (Tests pass a fixed clock.)
	Clock func() time.Time
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger

	// Pipelining turns transactional pipelining on or off for this DB's
	// transactions (TxnOptions.Pipelining overrides it per transaction).
	// With it on, a transactional write returns once the leaseholder has
	// evaluated and proposed it, and the transaction proves its writes
	// before a later read or write of their keys and before its commit
	// point (txn_pipeliner.go). ToggleDefault, the zero value, follows the
	// cluster setting (settings.go), on unless set off.
	Pipelining Toggle
	// PipelinedBytesMax bounds one transaction's pipelined writes that are
	// not proven yet, in bytes of key plus value: a write that would go
	// above it is sent without pipelining (it returns once replicated).
	// It bounds what a failed replication can make the transaction redo and
	// the proposals it can have queued at leaseholders; the client keeps
	// only key, hash and sequence number of each. At most 16 MiB (the
	// proofs of all of them fit in one request). Default 256 KiB.
	PipelinedBytesMax int
	// SettingsRefresh is how often the client re-reads the cluster's
	// transaction switches (settings.go): a change made with
	// SetTxnSwitches reaches this client within it. Default 5s.
	SettingsRefresh time.Duration
	// OnePC allows one-phase commits (Txn.CommitWith; txn_onepc.go):
	// writes handed to the commit that fall in one range commit in one Raft
	// proposal. TxnOptions.OnePC overrides it; ToggleDefault follows the
	// cluster setting (on unless set off).
	OnePC Toggle
	// ParallelCommits allows parallel commits (txn_commit.go): with
	// pipelining, the commit writes a STAGING record in parallel with the
	// proofs of the writes in flight. TxnOptions.ParallelCommits overrides
	// it; ToggleDefault follows the cluster setting (on unless set off).
	ParallelCommits Toggle

	// TestingCommitStep, if set, is called at each step of a parallel
	// commit, on the committing goroutine, and may block there: for tests
	// that stop a coordinator at that step (test/process). Steps:
	// "staging" (commit_ts taken and refreshed, nothing of the commit
	// sent), "staged" (the STAGING put won; called on its own goroutine),
	// "proof <i>" (before the proof of in-flight write i: with the hook
	// set, the writes are proven one at a time), "proven" (STAGING won and
	// every write proven, before the caller is told and before COMMITTED is
	// recorded). Not for production use.
	TestingCommitStep func(startTs uint64, step string)

	// StatusEncoding overrides the status-table encoding named by the
	// cluster's settings. Dangerous: every client and server of a cluster
	// must use the same encoding. For tests.
	StatusEncoding txnstatus.Encoding
}

// pipeliningDefault is what ToggleDefault means for Options.Pipelining
// when the cluster setting says default too: on, since the fault tests
// (internal/testcluster: bank, list-append, porcupine, each switch
// combination) pass with it.
const pipeliningDefault = true

// pipelinedBytesLimit bounds Options.PipelinedBytesMax: the proofs of a
// transaction's in-flight writes go in one request per range, which must
// stay below keys.RequestBytesMax with the requests' own overhead
// (at most keys.TxnKeysMax of them).
const pipelinedBytesLimit = keys.RequestBytesMax / 2

// timestampBatchLimit is the largest count a node accepts in one
// TimestampRequest (kvserver.OracleBatchMax; the client does not import the
// server, so the number is repeated here).
const timestampBatchLimit = 65536

// Option changes Options; any func(*Options) is one.
type Option func(*Options)

// WithOptions replaces all options set before it with o (fields left zero
// get defaults); pass it first.
func WithOptions(o Options) Option { return func(p *Options) { *p = o } }

// WithDialOptions adds gRPC dial options.
func WithDialOptions(d ...grpc.DialOption) Option {
	return func(o *Options) { o.DialOptions = append(o.DialOptions, d...) }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setDur(&o.RPCTimeout, 10*time.Second)
	setDur(&o.LookupTimeout, 2*time.Second)
	setDur(&o.ProbeAfter, 250*time.Millisecond)
	setDur(&o.ProbeTimeout, time.Second)
	setInt(&o.SendAttemptsMax, 40)
	setDur(&o.SendBackoffInitial, 5*time.Millisecond)
	setDur(&o.SendBackoffMax, time.Second)
	setInt(&o.TxnAttemptsMax, 20)
	setDur(&o.TxnBackoffInitial, 5*time.Millisecond)
	setDur(&o.TxnBackoffMax, time.Second)
	setDur(&o.HeartbeatTTL, 5*time.Second)
	setDur(&o.TxnLifetimeMax, 10*time.Minute)
	setDur(&o.IntentWaitMax, 2*time.Second)
	setDur(&o.IntentWaitYoungerMax, 100*time.Millisecond)
	setDur(&o.IntentWoundAfter, 50*time.Millisecond)
	setInt(&o.IntentRoundsMax, 16)
	setInt(&o.TxnKeysMax, keys.TxnKeysMax)
	setInt(&o.ReadSpansMax, 100_000)
	setInt(&o.ScanKeysMax, 100_000)
	setInt(&o.TimestampBatchMax, 4096)
	setInt(&o.ResolveWorkers, 4)
	setInt(&o.ResolveQueueMax, 1024)
	setInt(&o.ResolveBatchKeysMax, 1000)
	setInt(&o.StatusCacheEntriesMax, 65536)
	setInt(&o.StatusLookupCrossColumnMax, 200)
	setDur(&o.StatusScheduleExtension, 5*time.Minute)
	setInt(&o.StatusLookupSingleQueryMax, keys.TxnKeysMax)
	setDur(&o.AbortTimeout, 5*time.Second)
	setDur(&o.CloseDrainMax, 5*time.Second)
	setInt(&o.PipelinedBytesMax, 256<<10)
	setDur(&o.SettingsRefresh, 5*time.Second)
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate rejects negative or contradictory settings. Call after
// EnsureDefaults.
func (o *Options) Validate() error {
	for name, v := range map[string]time.Duration{
		"RPCTimeout": o.RPCTimeout, "SendBackoffInitial": o.SendBackoffInitial,
		"SendBackoffMax": o.SendBackoffMax, "TxnBackoffInitial": o.TxnBackoffInitial,
		"TxnBackoffMax": o.TxnBackoffMax, "HeartbeatTTL": o.HeartbeatTTL,
		"TxnLifetimeMax": o.TxnLifetimeMax, "IntentWaitMax": o.IntentWaitMax,
		"IntentWaitYoungerMax": o.IntentWaitYoungerMax, "AbortTimeout": o.AbortTimeout,
		"IntentWoundAfter": o.IntentWoundAfter,
		"CloseDrainMax":    o.CloseDrainMax,
		"LookupTimeout":    o.LookupTimeout, "DialTimeout": o.DialTimeout,
		"SettingsRefresh": o.SettingsRefresh, "StatusScheduleExtension": o.StatusScheduleExtension,
		"ProbeTimeout": o.ProbeTimeout,
	} {
		if v < 0 {
			return invalidArgf("option %s is negative (%v)", name, v)
		}
	}
	for name, v := range map[string]int{
		"SendAttemptsMax": o.SendAttemptsMax, "TxnAttemptsMax": o.TxnAttemptsMax,
		"IntentRoundsMax": o.IntentRoundsMax, "TxnKeysMax": o.TxnKeysMax,
		"ReadSpansMax": o.ReadSpansMax, "ScanKeysMax": o.ScanKeysMax,
		"TimestampBatchMax": o.TimestampBatchMax, "ResolveWorkers": o.ResolveWorkers,
		"ResolveQueueMax": o.ResolveQueueMax, "ResolveBatchKeysMax": o.ResolveBatchKeysMax,
		"PipelinedBytesMax": o.PipelinedBytesMax,
	} {
		if v < 0 {
			return invalidArgf("option %s is negative (%d)", name, v)
		}
	}
	if err := txnstatus.ValidateLoadLimits(o.StatusLookupCrossColumnMax, o.StatusLookupSingleQueryMax); err != nil ||
		o.StatusLookupSingleQueryMax > keys.TxnKeysMax {
		return invalidArgf("options StatusLookupCrossColumnMax %d and StatusLookupSingleQueryMax %d: want 1 <= CC <= SQ <= keys.TxnKeysMax %d",
			o.StatusLookupCrossColumnMax, o.StatusLookupSingleQueryMax, keys.TxnKeysMax)
	}
	if o.TxnKeysMax > keys.TxnKeysMax {
		return invalidArgf("option TxnKeysMax %d exceeds the server's keys.TxnKeysMax %d", o.TxnKeysMax, keys.TxnKeysMax)
	}
	if o.SendBackoffInitial > o.SendBackoffMax || o.TxnBackoffInitial > o.TxnBackoffMax {
		return invalidArgf("backoff initial above its maximum (send %v > %v or txn %v > %v)",
			o.SendBackoffInitial, o.SendBackoffMax, o.TxnBackoffInitial, o.TxnBackoffMax)
	}
	if o.TimestampBatchMax > timestampBatchLimit {
		return invalidArgf("option TimestampBatchMax %d exceeds %d, the most a node hands out per request", o.TimestampBatchMax, timestampBatchLimit)
	}
	if o.HeartbeatTTL < 5*time.Millisecond {
		return invalidArgf("option HeartbeatTTL %v is below 5ms", o.HeartbeatTTL)
	}
	if o.PipelinedBytesMax > pipelinedBytesLimit {
		return invalidArgf("option PipelinedBytesMax %d exceeds %d (the proofs must fit in one request)", o.PipelinedBytesMax, pipelinedBytesLimit)
	}
	if err := o.OnePC.validate("OnePC"); err != nil {
		return err
	}
	if err := o.ParallelCommits.validate("ParallelCommits"); err != nil {
		return err
	}
	if err := o.Pipelining.validate("Pipelining"); err != nil {
		return err
	}
	return nil
}

// Toggle turns an optional protocol feature on or off. Its zero value,
// ToggleDefault, defers: in TxnOptions to the DB's Options, in Options to
// the feature's default (which may change between releases, so a caller
// that wants a fixed setting says ToggleOn or ToggleOff).
type Toggle int8

const (
	ToggleDefault Toggle = iota
	ToggleOn
	ToggleOff
)

func (t Toggle) String() string {
	switch t {
	case ToggleDefault:
		return "default"
	case ToggleOn:
		return "on"
	case ToggleOff:
		return "off"
	}
	return fmt.Sprintf("Toggle(%d)", int(t))
}

// on reports whether the feature is on: t says, unless it is
// ToggleDefault, then parent does.
func (t Toggle) on(parent bool) bool {
	switch t {
	case ToggleOn:
		return true
	case ToggleOff:
		return false
	}
	return parent
}

func (t Toggle) validate(name string) error {
	if t < ToggleDefault || t > ToggleOff {
		return invalidArgf("option %s is %d, not a Toggle", name, int(t))
	}
	return nil
}

// Isolation is a transaction's isolation level.
type Isolation int

const (
	// Serializable (the default): the transaction behaves as if it ran
	// alone at its commit timestamp. Commit re-checks every key and span
	// read for changes in (start_ts, commit_ts].
	Serializable Isolation = iota
	// SnapshotIsolation: reads see the snapshot at start_ts and write-write
	// conflicts abort, but reads are not re-checked at commit (write skew
	// is possible).
	SnapshotIsolation
)

func (i Isolation) String() string {
	switch i {
	case Serializable:
		return "serializable"
	case SnapshotIsolation:
		return "snapshot"
	}
	return fmt.Sprintf("Isolation(%d)", int(i))
}

// TxnOptions configures one transaction; the zero value is a serializable
// transaction with the DB's limits.
type TxnOptions struct {
	Isolation Isolation
	// AttemptsMax overrides Options.TxnAttemptsMax for DB.Txn (0 = default).
	AttemptsMax int
	// Pipelining overrides Options.Pipelining for this transaction.
	Pipelining Toggle
	// OnePC overrides Options.OnePC for this transaction.
	OnePC Toggle
	// ParallelCommits overrides Options.ParallelCommits for this
	// transaction.
	ParallelCommits Toggle
	// Protocol is the transaction's commit protocol ("" = the cluster's,
	// DB.Protocol); see WithProtocol.
	Protocol Protocol
}

// TxnOption changes TxnOptions.
type TxnOption func(*TxnOptions)

// WithIsolation sets the isolation level.
func WithIsolation(i Isolation) TxnOption { return func(o *TxnOptions) { o.Isolation = i } }

// WithAttemptsMax bounds the attempts of DB.Txn for this transaction.
func WithAttemptsMax(n int) TxnOption { return func(o *TxnOptions) { o.AttemptsMax = n } }

// WithPipelining turns transactional pipelining on or off for this
// transaction, whatever Options.Pipelining says.
func WithPipelining(on bool) TxnOption {
	return func(o *TxnOptions) {
		o.Pipelining = ToggleOff
		if on {
			o.Pipelining = ToggleOn
		}
	}
}

// WithOnePC allows or forbids one-phase commit for this transaction.
func WithOnePC(on bool) TxnOption { return func(o *TxnOptions) { o.OnePC = toggleOf(on) } }

// WithParallelCommits turns parallel commits on or off for this
// transaction.
func WithParallelCommits(on bool) TxnOption {
	return func(o *TxnOptions) { o.ParallelCommits = toggleOf(on) }
}

func toggleOf(on bool) Toggle {
	if on {
		return ToggleOn
	}
	return ToggleOff
}

func (o *TxnOptions) validate() error {
	if o.Isolation != Serializable && o.Isolation != SnapshotIsolation {
		return invalidArgf("unknown isolation %d", int(o.Isolation))
	}
	if o.AttemptsMax < 0 {
		return invalidArgf("AttemptsMax is negative (%d)", o.AttemptsMax)
	}
	if err := o.OnePC.validate("TxnOptions.OnePC"); err != nil {
		return err
	}
	if err := o.ParallelCommits.validate("TxnOptions.ParallelCommits"); err != nil {
		return err
	}
	return o.Pipelining.validate("TxnOptions.Pipelining")
}
