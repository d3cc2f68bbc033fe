package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/tso"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// The status encoding schedule (issue 10 item 5): which encoding holds the
// status record of each start timestamp, so that a running cluster can
// move between v1 and tickets (txnstatus.Schedule). It is stored as
// versions under keys.StatusSchedulePrefix, newest first; version v+1 is
// written by put-unless-exists, so two writers of the next version cannot
// both win (a compare-and-swap on the version). No record means version 0:
// the cluster's bootstrap encoding from 0 on, valid through 0. The node
// that writes a version checks it (eval/status_schedule.go: only the
// newest + 1, following txnstatus.CheckNext) and deletes old versions,
// keeping the newest eval.StatusScheduleVersionsKept; a put of a version
// at or below the newest, stored or pruned, is answered as a lost race.
//
// Every client keeps the newest version it read. Before it begins a
// transaction at s, the schedule must be valid through s: if the version
// it has is not, it reads the newest, and if that is not either, it
// extends it (next version: same eras, valid through s +
// Options.StatusScheduleExtension). A reader that meets another
// transaction's timestamp does the same before it reads or writes that
// transaction's status. A change of encoding (SetStatusEncoding) adds an
// era from just above the newest version's valid-through; every
// transaction begun at or below it keeps the encoding it had, and those
// above it see the change when they make sure of the schedule. Clusters
// bootstrapped before the schedule existed (no
// ClusterSettings.status_encoding_schedule) and clients given
// Options.StatusEncoding keep one encoding and never read the schedule.

// scheduleState is a version of the schedule.
type scheduleState struct {
	s       txnstatus.Schedule
	version uint64
}

// statusSchedule is a DB's view of the schedule.
type statusSchedule struct {
	enabled bool
	cur     atomic.Pointer[scheduleState]
	// mu serializes reads and extensions of the schedule by this client.
	mu sync.Mutex
	// extending is set while a background extension runs.
	extending atomic.Bool
}

// StatusCutoverLead is how far above the oracle's current timestamp, at
// the least, SetStatusEncoding places a new era's first start timestamp:
// the node that writes the schedule version refuses a cutover that is not
// above a timestamp it takes itself (txnstatus.CheckNext), and that
// timestamp is later than the client's by the write's round trip.
const StatusCutoverLead = 5 * time.Second

// StatusBeginAttemptsMax bounds the start timestamps Begin draws when
// they collide with another era's keys (txnstatus.Schedule.Collides).
const StatusBeginAttemptsMax = 8

// scheduleWritesMax bounds the versions one ensure or change tries to
// write when others win the race for the same version.
const scheduleWritesMax = 16

func (db *DB) initSchedule() {
	sc := &db.schedule
	sc.enabled = db.settings.GetStatusEncodingSchedule() && db.opts.StatusEncoding == nil
	v := uint64(math.MaxUint64)
	if sc.enabled {
		v = 0
	}
	sc.cur.Store(&scheduleState{s: txnstatus.NewSchedule(db.enc, v)})
}

// encOf returns the encoding of startTs's status record. The caller has
// made sure of the schedule through startTs (ensureSchedule): Begin for
// its own transactions, resolveForeign and lookupStatuses for others'.
func (db *DB) encOf(startTs uint64) txnstatus.Encoding {
	st := db.schedule.cur.Load()
	if startTs > st.s.ValidThrough {
		db.opts.Logger.Warn("canopy client: status encoding schedule not known this far; using its last era", "start_ts", startTs,
			"valid_through", st.s.ValidThrough)
	}
	return st.s.For(startTs)
}

// ensureSchedule makes sure the schedule this client holds is valid through
// every ts of tss: it reads the newest version and, with extend, extends
// it when that is not valid far enough either. Without extend, a
// timestamp the newest version does not cover is left as it is (no
// transaction can have begun there yet).
//
// Only Begin extends (its own start_ts). Lookups, intent resolution and
// deciders read: the transactions they meet began elsewhere, and their
// Begin made the schedule valid through their start_ts. A reader that
// extended would push the earliest cutover of an encoding change one of
// its own extensions ahead, whatever extension the writing clients use.
func (db *DB) ensureSchedule(ctx context.Context, extend bool, tss ...uint64) error {
	sc := &db.schedule
	if !sc.enabled || len(tss) == 0 {
		return nil
	}
	top := tss[0]
	for _, ts := range tss[1:] {
		top = max(top, ts)
	}
	st := sc.cur.Load()
	if top <= st.s.ValidThrough {
		if extend && top > st.s.ValidThrough-min(st.s.ValidThrough, db.scheduleUnits()/2) && sc.extending.CompareAndSwap(false, true) {
			// Half the extension used: extend ahead, off the caller's path.
			go func() {
				defer sc.extending.Store(false)
				ctx, cancel := context.WithTimeout(db.ctx, db.opts.LookupTimeout)
				defer cancel()
				if err := db.extendSchedule(ctx, top); err != nil && db.ctx.Err() == nil {
					db.opts.Logger.Debug("canopy client: extending the status encoding schedule ahead failed", "err", err)
				}
			}()
		}
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	latest, err := db.readSchedule(ctx)
	if err != nil {
		return err
	}
	if top <= latest.s.ValidThrough || !extend {
		return nil
	}
	return db.extendScheduleLocked(ctx, top)
}

// scheduleUnits is Options.StatusScheduleExtension in timestamp units.
func (db *DB) scheduleUnits() uint64 { return tsUnits(db.opts.StatusScheduleExtension) }

// tsUnits is d in timestamp units (milliseconds above the oracle's
// logical bits).
func tsUnits(d time.Duration) uint64 { return uint64(d.Milliseconds()) << tso.DefaultLogicalBits }

func (db *DB) extendSchedule(ctx context.Context, ts uint64) error {
	db.schedule.mu.Lock()
	defer db.schedule.mu.Unlock()
	return db.extendScheduleLocked(ctx, ts)
}

// extendScheduleLocked writes versions until the newest is valid through
// ts + the extension. It writes nothing while the newest is valid through
// ts + half the extension: so the extension ahead (ensureSchedule, once
// half the extension is used) does write, and clients that race to extend
// write once between them.
func (db *DB) extendScheduleLocked(ctx context.Context, ts uint64) error {
	units := db.scheduleUnits()
	to, enough := ts+units, ts+units/2
	if to < ts {
		to, enough = math.MaxUint64, math.MaxUint64
	}
	return db.writeSchedule(ctx, func(s txnstatus.Schedule) (txnstatus.Schedule, bool, error) {
		if s.ValidThrough >= enough {
			return s, false, nil
		}
		return s.Extend(to), true, nil
	})
}

// writeSchedule reads the newest version, applies change to it and writes
// the result as the next version, again on the newest if another writer
// won that version. change returns whether there is anything to write. It
// never writes on a version it has not just read: a version written on a
// stale one would be a second history.
func (db *DB) writeSchedule(ctx context.Context, change func(txnstatus.Schedule) (txnstatus.Schedule, bool, error)) error {
	st, err := db.readSchedule(ctx)
	if err != nil {
		return err
	}
	for range scheduleWritesMax {
		next, write, err := change(st.s)
		if err != nil || !write {
			return err
		}
		v, err := txnstatus.EncodeSchedule(next)
		if err != nil {
			return fmt.Errorf("%w: status encoding schedule: %w", ErrInternal, err)
		}
		ok, existing, err := db.putUnlessExists(ctx, keys.StatusScheduleKey(st.version+1), v)
		if err != nil {
			return publicError(err)
		}
		if ok {
			db.schedule.cur.Store(&scheduleState{s: next, version: st.version + 1})
			return nil
		}
		if _, err := txnstatus.DecodeSchedule(existing); err != nil {
			return fmt.Errorf("%w: %w: status encoding schedule version %d: %w", ErrInternal, errBadStatus, st.version+1, err)
		}
		// Another writer won this version: start again from the newest.
		if st, err = db.readSchedule(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: the status encoding schedule changed %d times while this client tried to write it", ErrUnavailable, scheduleWritesMax)
}

// errScanDone stops a plain scan after its first pair.
var errScanDone = errors.New("scan done")

// readSchedule reads the newest version of the schedule and keeps it.
func (db *DB) readSchedule(ctx context.Context) (*scheduleState, error) {
	var found *scheduleState
	// The newest version sorts first: one pair is enough.
	err := db.sender.plainScanLimit(ctx, keys.StatusSchedulePrefix, keys.StatusScheduleEnd, 1, func(k, v []byte) error {
		ver, err := keys.StatusScheduleVersion(k)
		if err != nil {
			return fmt.Errorf("%w: %w: %w", ErrInternal, errBadStatus, err)
		}
		s, err := txnstatus.DecodeSchedule(v)
		if err != nil {
			return fmt.Errorf("%w: %w: status encoding schedule version %d: %w", ErrInternal, errBadStatus, ver, err)
		}
		found = &scheduleState{s: s, version: ver}
		return errScanDone
	})
	if err != nil && !errors.Is(err, errScanDone) {
		return nil, publicError(err)
	}
	st := db.schedule.cur.Load()
	if found != nil && found.version > st.version {
		db.schedule.cur.Store(found)
		st = found
	}
	return st, nil
}

// StatusEra is one era of the status encoding schedule.
type StatusEra struct {
	// From is the first start timestamp of the era.
	From uint64
	// Encoding is "v1", "tickets" or "tickets-mix".
	Encoding string
}

// StatusSchedule is the cluster's status encoding schedule as read now.
type StatusSchedule struct {
	Eras []StatusEra
	// ValidThrough: the encoding of every start timestamp up to it is
	// final; a change takes effect just above it.
	ValidThrough uint64
	// Version of the schedule (0: never written).
	Version uint64
	// Enabled is false for clusters bootstrapped before the schedule: they
	// keep one encoding.
	Enabled bool
}

func (db *DB) publicSchedule(st *scheduleState) StatusSchedule {
	out := StatusSchedule{ValidThrough: st.s.ValidThrough, Version: st.version, Enabled: db.schedule.enabled}
	for _, e := range st.s.Eras {
		out.Eras = append(out.Eras, StatusEra{From: e.From, Encoding: e.Encoding.Name()})
	}
	return out
}

// StatusEncodingSchedule reads the cluster's status encoding schedule.
func (db *DB) StatusEncodingSchedule(ctx context.Context) (StatusSchedule, error) {
	if !db.schedule.enabled {
		return db.publicSchedule(db.schedule.cur.Load()), nil
	}
	db.schedule.mu.Lock()
	defer db.schedule.mu.Unlock()
	st, err := db.readSchedule(ctx)
	if err != nil {
		return StatusSchedule{}, err
	}
	return db.publicSchedule(st), nil
}

// SetStatusEncoding moves the cluster's status table to the encoding named
// ("v1", "tickets" or "tickets-mix", with the cluster's tickets PQ and NP) for every
// transaction that starts above the schedule's current valid-through:
// transactions started before keep their encoding, and lookups of their
// timestamps use it. It returns the schedule written; the change takes
// effect at its last era's From, within the larger of
// Options.StatusScheduleExtension and StatusCutoverLead of now. Setting the encoding
// already in force is ErrInvalidArgument, and so is a schedule the node
// refuses (txnstatus.CheckNext; a cutover no longer in the future when
// the write reached it: try again).
func (db *DB) SetStatusEncoding(ctx context.Context, name string) (StatusSchedule, error) {
	if !db.schedule.enabled {
		return StatusSchedule{}, invalidArgf("this cluster was bootstrapped before the status encoding schedule existed (or the client was given Options.StatusEncoding): its status encoding cannot change")
	}
	enc, err := txnstatus.Named(name, db.settings.GetTicketsPartitioningQuantum(), db.settings.GetTicketsRowsPerQuantum())
	if err != nil {
		return StatusSchedule{}, invalidArgf("%v", err)
	}
	db.schedule.mu.Lock()
	defer db.schedule.mu.Unlock()
	lead := tsUnits(StatusCutoverLead)
	err = db.writeSchedule(ctx, func(s txnstatus.Schedule) (txnstatus.Schedule, bool, error) {
		if txnstatus.SameEncoding(s.Last(), enc) {
			return s, false, invalidArgf("the status encoding is already %s (from start timestamp %d)", name, s.Eras[len(s.Eras)-1].From)
		}
		// Timestamps up to now may be begun with the old encoding by
		// clients that extend the schedule before this change lands:
		// the new era starts above both, and StatusCutoverLead above
		// now, because the node that writes it refuses a cutover at or
		// below a timestamp it takes after this one.
		now, err := db.Timestamp(ctx)
		if err != nil {
			return s, false, err
		}
		next, err := s.Switch(enc, max(s.ValidThrough, now+lead, s.Eras[len(s.Eras)-1].From)+1)
		if err != nil {
			return s, false, invalidArgf("%v", err)
		}
		return next, true, nil
	})
	if err != nil {
		return StatusSchedule{}, err
	}
	return db.publicSchedule(db.schedule.cur.Load()), nil
}
