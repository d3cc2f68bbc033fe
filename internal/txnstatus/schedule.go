package txnstatus

import (
	"encoding/binary"
	"fmt"
	"math"
)

// A Schedule says which encoding holds the status record of each start
// timestamp, so that a running cluster can move from one encoding to the
// other (issue 10 item 5; the record's "live migrations", after AtlasDB's
// coordination service): era i's encoding serves the start timestamps in
// [Eras[i].From, Eras[i+1].From), the last era's from its From on.
//
// ValidThrough is the schedule's promise: the encoding of every start
// timestamp up to it is final. A change may only add an era that begins
// above ValidThrough (Switch), and ValidThrough only grows (Extend), so a
// client that knows a schedule valid through V may use it for any start
// timestamp <= V without asking again, and a client that needs a start
// timestamp above it must read the schedule again and, if it is still not
// valid that far, extend it (a put-unless-exists of the next version; see
// client/status_schedule.go). Who begins a transaction at s makes sure the
// schedule is valid through s before writing anything, so every reader
// that meets s finds it covered once it has read the schedule.
//
// Two encodings may map different start timestamps to the same key (a v1
// key of 9 bytes can equal a tickets key). Collides tells whether start
// timestamp ts's status or staging key is also a status or staging key of
// another era's encoding for a timestamp of that era; the client then does
// not begin a transaction at ts (it draws another). Whichever of two
// colliding timestamps is begun second sees the other's era, so no two
// transactions ever share a key.
type Schedule struct {
	// Eras are sorted by From, the first from 0, at most ErasMax.
	Eras []Era
	// ValidThrough: the encoding of every start timestamp <= it is final.
	ValidThrough uint64
}

// Era is one stretch of start timestamps with one encoding.
type Era struct {
	From     uint64
	Encoding Encoding
}

// ErasMax bounds a schedule's eras.
const ErasMax = 64

// NewSchedule returns the schedule of a cluster that has only ever used
// enc, valid through validThrough.
func NewSchedule(enc Encoding, validThrough uint64) Schedule {
	return Schedule{Eras: []Era{{From: 0, Encoding: enc}}, ValidThrough: validThrough}
}

// For returns the encoding of startTs's status record. Only a start
// timestamp <= ValidThrough has a final answer.
func (s Schedule) For(startTs uint64) Encoding { return s.Eras[s.era(startTs)].Encoding }

// era returns the index of the era of ts.
func (s Schedule) era(ts uint64) int {
	i := len(s.Eras) - 1
	for i > 0 && s.Eras[i].From > ts {
		i--
	}
	return i
}

// Last returns the encoding of the last era: the one new transactions use
// once the schedule is valid through their start.
func (s Schedule) Last() Encoding { return s.Eras[len(s.Eras)-1].Encoding }

// Extend returns s valid through max(ValidThrough, to).
func (s Schedule) Extend(to uint64) Schedule {
	out := s.clone()
	out.ValidThrough = max(s.ValidThrough, to)
	return out
}

// Switch returns s with a new era of enc from the timestamp from on. from
// must be above ValidThrough (earlier timestamps are final) and above the
// last era's From, and enc must differ from the last era's encoding.
func (s Schedule) Switch(enc Encoding, from uint64) (Schedule, error) {
	if last := s.Eras[len(s.Eras)-1].From; from <= s.ValidThrough || from <= last {
		return Schedule{}, fmt.Errorf("%w: a new era must begin above the schedule's valid-through %d and the last era's start %d, not at %d",
			ErrInvalidArgument, s.ValidThrough, last, from)
	}
	if SameEncoding(enc, s.Last()) {
		return Schedule{}, fmt.Errorf("%w: the status encoding is already %s", ErrInvalidArgument, enc.Name())
	}
	if len(s.Eras) >= ErasMax {
		return Schedule{}, fmt.Errorf("%w: a schedule holds at most ErasMax=%d eras", ErrInvalidArgument, ErasMax)
	}
	out := s.clone()
	out.Eras = append(out.Eras, Era{From: from, Encoding: enc})
	return out, nil
}

func (s Schedule) clone() Schedule {
	return Schedule{Eras: append([]Era(nil), s.Eras...), ValidThrough: s.ValidThrough}
}

// SameEncoding reports whether a and b write the same keys and values.
func SameEncoding(a, b Encoding) bool {
	ta, aok := a.(tickets)
	tb, bok := b.(tickets)
	if aok || bok {
		return aok && bok && ta == tb
	}
	return a.Name() == b.Name()
}

// Collides reports whether startTs's status key or staging key (in its
// era's encoding) is also a status or staging key, in another era's
// encoding, of a start timestamp of that era. Then no transaction may
// begin at startTs.
func (s Schedule) Collides(startTs uint64) bool {
	i := s.era(startTs)
	enc := s.Eras[i].Encoding
	k := enc.Key(startTs)
	// Our status key as their status key; our staging key (k+0x00) as
	// their status key; our status key as their staging key (k ends in
	// 0x00 and k[:len-1] is their status key). Our staging key as their
	// staging key is our status key as theirs.
	candidates := [][]byte{k, append(append([]byte(nil), k...), StagingSuffix)}
	if len(k) > 0 && k[len(k)-1] == StagingSuffix {
		candidates = append(candidates, k[:len(k)-1])
	}
	for j, e := range s.Eras {
		if j == i || SameEncoding(e.Encoding, enc) {
			continue // one encoding is a bijection: no two timestamps share a key
		}
		for _, c := range candidates {
			ts, err := e.Encoding.StartTs(c)
			if err == nil && s.era(ts) == j {
				return true
			}
		}
	}
	return false
}

// Encoding of a schedule (the value of a status schedule record):
//
//	byte      format (1)
//	uint64    ValidThrough, big endian
//	byte      count of eras
//	per era:  uint64 From, byte kind (1 v1, 2 tickets, 3 tickets-mix), and for tickets
//	          uint64 PQ, uint64 NP
const scheduleFormat = 1

const (
	kindV1         = 1
	kindTickets    = 2
	kindTicketsMix = 3
)

// EncodeSchedule encodes s. It returns ErrInvalidArgument for a schedule
// that breaks its invariants (no era, first era not from 0, eras out of
// order, too many, an unknown encoding).
func EncodeSchedule(s Schedule) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := []byte{scheduleFormat}
	out = binary.BigEndian.AppendUint64(out, s.ValidThrough)
	out = append(out, byte(len(s.Eras)))
	for _, e := range s.Eras {
		out = binary.BigEndian.AppendUint64(out, e.From)
		switch enc := e.Encoding.(type) {
		case v1:
			out = append(out, kindV1)
		case tickets:
			kind := byte(kindTickets)
			if enc.mix {
				kind = kindTicketsMix
			}
			out = append(out, kind)
			out = binary.BigEndian.AppendUint64(out, enc.pq)
			out = binary.BigEndian.AppendUint64(out, enc.np)
		default:
			return nil, fmt.Errorf("%w: encoding %s cannot be scheduled", ErrInvalidArgument, e.Encoding.Name())
		}
	}
	return out, nil
}

func (s Schedule) check() error {
	if len(s.Eras) == 0 || len(s.Eras) > ErasMax || s.Eras[0].From != 0 {
		return fmt.Errorf("%w: a schedule needs 1 to ErasMax=%d eras, the first from 0", ErrInvalidArgument, ErasMax)
	}
	for i := 1; i < len(s.Eras); i++ {
		if s.Eras[i].From <= s.Eras[i-1].From {
			return fmt.Errorf("%w: schedule cutovers not strictly increasing: era %d begins at %d, not above era %d's %d",
				ErrInvalidArgument, i, s.Eras[i].From, i-1, s.Eras[i-1].From)
		}
	}
	return nil
}

// CheckNext returns nil if next may be written as the version after prev,
// and otherwise an error wrapping ErrInvalidArgument that names the
// problem. now is a timestamp the writer's node took from the oracle
// after it latched the schedule: a cutover at or below it may already
// have start timestamps drawn under the old encoding. The rules, which
// every version written by client/status_schedule.go keeps (Extend,
// Switch):
//
//   - next is a well-formed schedule (check): 1 to ErasMax eras, the first
//     from 0, cutovers strictly increasing;
//   - no existing era is removed or altered: prev's eras are next's first
//     eras, with the same From and the same encoding (SameEncoding);
//   - ValidThrough never goes back;
//   - each era next adds begins above prev.ValidThrough (the encoding of
//     every start timestamp up to it is final) and above now, and
//     changes the encoding of the era before it.
func CheckNext(prev, next Schedule, now uint64) error {
	if err := next.check(); err != nil {
		return err
	}
	if len(next.Eras) < len(prev.Eras) {
		return fmt.Errorf("%w: the new version has %d eras where the newest has %d: existing eras may not be removed",
			ErrInvalidArgument, len(next.Eras), len(prev.Eras))
	}
	for i, e := range prev.Eras {
		n := next.Eras[i]
		if n.From != e.From || !SameEncoding(n.Encoding, e.Encoding) {
			return fmt.Errorf("%w: era %d (%s from %d) of the newest version is altered to %s from %d: existing eras may not change",
				ErrInvalidArgument, i, e.Encoding.Name(), e.From, n.Encoding.Name(), n.From)
		}
	}
	if next.ValidThrough < prev.ValidThrough {
		return fmt.Errorf("%w: valid-through %d is below the newest version's %d: it may not go back",
			ErrInvalidArgument, next.ValidThrough, prev.ValidThrough)
	}
	for i := len(prev.Eras); i < len(next.Eras); i++ {
		e := next.Eras[i]
		switch {
		case e.From <= prev.ValidThrough:
			return fmt.Errorf("%w: cutover %d (era %d, %s) is not above the newest version's valid-through %d: start timestamps up to it keep their encoding",
				ErrInvalidArgument, e.From, i, e.Encoding.Name(), prev.ValidThrough)
		case e.From <= now:
			return fmt.Errorf("%w: cutover %d (era %d, %s) is not in the future: the node's timestamp is %d",
				ErrInvalidArgument, e.From, i, e.Encoding.Name(), now)
		case SameEncoding(e.Encoding, next.Eras[i-1].Encoding):
			return fmt.Errorf("%w: era %d repeats the encoding of the era before it (%s)", ErrInvalidArgument, i, e.Encoding.Name())
		}
	}
	return nil
}

// Named returns the encoding called name ("v1", "tickets" or
// "tickets-mix"; the tickets encodings with partitioning quantum pq and
// rows per quantum np, 0 for the defaults). An unknown name or bad
// parameters are ErrInvalidArgument.
func Named(name string, pq, np uint64) (Encoding, error) {
	switch name {
	case "v1":
		return NewV1(), nil
	case "tickets":
		return NewTickets(pq, np)
	case "tickets-mix":
		return NewTicketsMix(pq, np)
	}
	return nil, fmt.Errorf("%w: status encoding %q: want v1, tickets or tickets-mix", ErrInvalidArgument, name)
}

// DecodeSchedule inverts EncodeSchedule; bytes it cannot have written are
// ErrCorruption.
func DecodeSchedule(b []byte) (Schedule, error) {
	bad := func(what string) (Schedule, error) {
		return Schedule{}, fmt.Errorf("%w: status schedule record: %s", ErrCorruption, what)
	}
	if len(b) < 10 || b[0] != scheduleFormat {
		return bad("unknown format or too short")
	}
	s := Schedule{ValidThrough: binary.BigEndian.Uint64(b[1:9])}
	n := int(b[9])
	b = b[10:]
	for range n {
		if len(b) < 9 {
			return bad("truncated era")
		}
		from, kind := binary.BigEndian.Uint64(b), b[8]
		b = b[9:]
		var enc Encoding
		switch kind {
		case kindV1:
			enc = NewV1()
		case kindTickets, kindTicketsMix:
			if len(b) < 16 {
				return bad("truncated tickets era")
			}
			pq, np := binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
			b = b[16:]
			if pq == 0 || np == 0 || pq%np != 0 || pq == math.MaxUint64 {
				return bad("tickets era with bad PQ or NP")
			}
			enc = tickets{pq: pq, np: np}
			if kind == kindTicketsMix {
				var err error
				if enc, err = NewTicketsMix(pq, np); err != nil {
					return bad(err.Error())
				}
			}
		default:
			return bad(fmt.Sprintf("era of unknown kind %d", kind))
		}
		s.Eras = append(s.Eras, Era{From: from, Encoding: enc})
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	if err := s.check(); err != nil {
		return bad(err.Error())
	}
	return s, nil
}
