package eval

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"
)

// scheduleFixture is range 1 of a cluster bootstrapped with the v1 status
// encoding and the schedule, on an in-memory engine.
type scheduleFixture struct {
	t   *testing.T
	eng *storage.Engine
	c   Context
}

func newScheduleFixture(t *testing.T, settings *rpcpb.ClusterSettings) *scheduleFixture {
	t.Helper()
	eng, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	sv, err := proto.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	b := eng.NewBatch()
	defer b.Close()
	if err := mvcc.PutPlain(b, keys.ClusterSettingsKey, sv); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	return &scheduleFixture{t: t, eng: eng, c: Context{Desc: &rpcpb.RangeDescriptor{RangeId: 1, StartKey: keys.MinKey, EndKey: keys.HeartbeatPrefix}}}
}

// put evaluates the batch of one put of value at key with ScheduleTs now
// and applies it; it returns the response or the error.
func (f *scheduleFixture) put(ru *rpcpb.RequestUnion, now uint64) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	f.t.Helper()
	b := f.eng.NewBatch()
	defer b.Close()
	c := f.c
	c.ScheduleTs = now
	resp, _ := EvalWrite(c, b, &rpcpb.BatchRequest{RangeId: 1, Requests: []*rpcpb.RequestUnion{ru}})
	if resp.Error != nil {
		return nil, resp.Error
	}
	if err := b.Commit(false); err != nil {
		f.t.Fatal(err)
	}
	return resp.Responses[0], nil
}

func scheduleBytes(t *testing.T, s txnstatus.Schedule) []byte {
	t.Helper()
	b, err := txnstatus.EncodeSchedule(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putScheduleReq(version uint64, value []byte) *rpcpb.RequestUnion {
	return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{
		Key: keys.StatusScheduleKey(version), Value: value}}}
}

// versions returns the stored versions, newest first.
func (f *scheduleFixture) versions() []uint64 {
	f.t.Helper()
	kvs, _, err := mvcc.ScanPlain(f.eng, keys.StatusSchedulePrefix, keys.StatusScheduleEnd, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []uint64
	for _, kv := range kvs {
		v, err := keys.StatusScheduleVersion(kv.Key)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestStatusScheduleWrites steps the writes of schedule versions on range
// 1: the versions the client writes (extensions, a change of encoding)
// are accepted, a lost race answers like a lost put-unless-exists, and
// each malformed version is INVALID_ARGUMENT with a message naming its
// problem, leaving the stored versions as they were.
func TestStatusScheduleWrites(t *testing.T) {
	f := newScheduleFixture(t, &rpcpb.ClusterSettings{StatusEncoding: "v1", StatusEncodingSchedule: true})
	tk, err := txnstatus.NewTickets(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	v0 := txnstatus.NewSchedule(txnstatus.NewV1(), 0)
	v1 := v0.Extend(1000)
	ok := func(version uint64, s txnstatus.Schedule, now uint64) {
		t.Helper()
		resp, e := f.put(putScheduleReq(version, scheduleBytes(t, s)), now)
		if e != nil || !resp.GetPlainPutUnlessExists().GetSucceeded() {
			t.Fatalf("version %d: %v, %v; want written", version, resp, e)
		}
	}
	refused := func(version uint64, value []byte, now uint64, want string) {
		t.Helper()
		before := f.versions()
		_, e := f.put(putScheduleReq(version, value), now)
		if e == nil || e.Code != rpcpb.ErrorCode_INVALID_ARGUMENT || !strings.Contains(e.Message, want) {
			t.Fatalf("version %d: %v, want INVALID_ARGUMENT naming %q", version, e, want)
		}
		if after := f.versions(); len(after) != len(before) || (len(after) > 0 && after[0] != before[0]) {
			t.Fatalf("a refused write changed the versions: %v, then %v", before, after)
		}
	}

	// Version 1 must follow the bootstrap encoding (v1 from 0).
	wrongStart := txnstatus.NewSchedule(tk, 1000)
	refused(1, scheduleBytes(t, wrongStart), 0, "may not change")
	refused(2, scheduleBytes(t, v1), 0, "skips versions")
	refused(0, scheduleBytes(t, v1), 0, "never written")
	ok(1, v1, 10)

	// A second writer of version 1 loses the race: no error, the value
	// in place.
	resp, e := f.put(putScheduleReq(1, scheduleBytes(t, v1.Extend(2000))), 10)
	if e != nil || resp.GetPlainPutUnlessExists().GetSucceeded() || string(resp.GetPlainPutUnlessExists().GetExisting()) != string(scheduleBytes(t, v1)) {
		t.Fatalf("a lost race for version 1: %v, %v", resp, e)
	}

	// Unknown encoding: a tickets era's kind byte changed to 9.
	sw, err := v1.Switch(tk, 1001)
	if err != nil {
		t.Fatal(err)
	}
	bad := scheduleBytes(t, sw)
	bad[10+9+8] = 9 // format, valid-through, count; era 0 (from, kind); era 1's from; its kind
	refused(2, bad, 10, "unknown kind 9")
	// Cutovers not strictly increasing: two eras from 1001.
	// (EncodeSchedule refuses to write that: the bytes are sw's with a
	// third era, v1 from 1001, appended.)
	twice := binary.BigEndian.AppendUint64(scheduleBytes(t, sw), 1001)
	twice = append(twice, 1) // v1
	twice[9] = 3             // eras
	refused(2, twice, 10, "not strictly increasing")
	// A cutover at or below the newest valid-through.
	early, err := v0.Extend(500).Switch(tk, 600)
	if err != nil {
		t.Fatal(err)
	}
	refused(2, scheduleBytes(t, early.Extend(1000)), 10, "not above the newest version's valid-through 1000")
	// A cutover not above the node's timestamp.
	refused(2, scheduleBytes(t, sw), 1001, "not in the future: the node's timestamp is 1001")
	// Valid-through going back.
	refused(2, scheduleBytes(t, v0.Extend(999)), 10, "may not go back")
	ok(2, sw, 1000)
	// Removing the tickets era again.
	refused(3, scheduleBytes(t, v1.Extend(5000)), 10, "may not be removed")

	// Any other write of a schedule key is refused by the server before
	// evaluation (WritesStatusScheduleKey); a put-unless-exists elsewhere
	// is not affected.
	for _, ru := range []*rpcpb.RequestUnion{
		{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: keys.StatusScheduleKey(2), Value: []byte("x")}}},
		{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: keys.StatusScheduleKey(1), Delete: true}}},
		{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: keys.StatusScheduleKey(3), Value: []byte("x")}}},
		{Value: &rpcpb.RequestUnion_CommitOnePc{CommitOnePc: &rpcpb.CommitOnePCRequest{Writes: []*rpcpb.OnePCWrite{{Key: []byte{0x00, 'b'}}, {Key: keys.StatusScheduleKey(3)}}}}},
	} {
		if !WritesStatusScheduleKey(ru) {
			t.Errorf("%s of a schedule key is not refused", ru.Method())
		}
	}
	if WritesStatusScheduleKey(putScheduleReq(3, nil)) || WritesStatusScheduleKey(&rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: keys.HeartbeatKey(1)}}}) {
		t.Error("a schedule put-unless-exists or a heartbeat write is refused")
	}
}

// TestStatusScheduleWritesFixedCluster: a cluster bootstrapped before the
// schedule existed has no schedule to write.
func TestStatusScheduleWritesFixedCluster(t *testing.T) {
	f := newScheduleFixture(t, &rpcpb.ClusterSettings{StatusEncoding: "tickets"})
	tk, err := txnstatus.NewTickets(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, e := f.put(putScheduleReq(1, scheduleBytes(t, txnstatus.NewSchedule(tk, 100))), 0)
	if e == nil || e.Code != rpcpb.ErrorCode_INVALID_ARGUMENT || !strings.Contains(e.Message, "fixed") {
		t.Fatalf("a schedule write on a fixed-encoding cluster: %v", e)
	}
}

// TestStatusScheduleVersionsPruned: each version written deletes those
// StatusScheduleVersionsKept or more below it, so the stored versions stay
// bounded however many extensions run; a writer that still holds a pruned
// version loses the race (the newest value comes back) instead of writing
// it again; and a backlog from before pruning shrinks by at most
// StatusSchedulePruneMax a write.
func TestStatusScheduleVersionsPruned(t *testing.T) {
	f := newScheduleFixture(t, &rpcpb.ClusterSettings{StatusEncoding: "tickets-mix", StatusEncodingSchedule: true})
	mix, err := txnstatus.NewTicketsMix(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := txnstatus.NewSchedule(mix, 0)
	const n = 3 * StatusScheduleVersionsKept
	for v := uint64(1); v <= n; v++ {
		s = s.Extend(v * 100)
		resp, e := f.put(putScheduleReq(v, scheduleBytes(t, s)), 0)
		if e != nil || !resp.GetPlainPutUnlessExists().GetSucceeded() {
			t.Fatalf("version %d: %v, %v", v, resp, e)
		}
		got := f.versions()
		if want := min(int(v), StatusScheduleVersionsKept); len(got) != want || got[0] != v || got[len(got)-1] != v-uint64(want)+1 {
			t.Fatalf("after version %d: stored %v, want the %d newest", v, got, want)
		}
	}
	// A stale writer of a pruned version.
	resp, e := f.put(putScheduleReq(2, scheduleBytes(t, txnstatus.NewSchedule(mix, 0).Extend(5000))), 0)
	if e != nil || resp.GetPlainPutUnlessExists().GetSucceeded() || string(resp.GetPlainPutUnlessExists().GetExisting()) != string(scheduleBytes(t, s)) {
		t.Fatalf("a put of pruned version 2: %v, %v; want a lost race answered with the newest version", resp, e)
	}
	if got := f.versions(); len(got) != StatusScheduleVersionsKept || got[0] != n {
		t.Fatalf("a lost race changed the versions: %v", got)
	}

	// A backlog: versions n+1 .. n+backlog stored directly, as before
	// pruning existed.
	const backlog = StatusSchedulePruneMax + 2*StatusScheduleVersionsKept
	b := f.eng.NewBatch()
	for v := uint64(n + 1); v <= n+backlog; v++ {
		s = s.Extend(v * 100)
		if err := mvcc.PutPlain(b, keys.StatusScheduleKey(v), scheduleBytes(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
	stored := StatusScheduleVersionsKept + backlog
	for v := uint64(n + backlog + 1); stored > StatusScheduleVersionsKept; v++ {
		s = s.Extend(v * 100)
		if _, e := f.put(putScheduleReq(v, scheduleBytes(t, s)), 0); e != nil {
			t.Fatalf("version %d: %v", v, e)
		}
		want := max(StatusScheduleVersionsKept, stored+1-StatusSchedulePruneMax)
		if got := f.versions(); len(got) != want || got[0] != v {
			t.Fatalf("after version %d with %d stored: %d stored (newest %d), want %d", v, stored, len(got), got[0], want)
		}
		stored = want
	}
}
