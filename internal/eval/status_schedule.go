package eval

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"google.golang.org/protobuf/proto"
)

// Writes of the status encoding schedule (keys.StatusSchedulePrefix,
// txnstatus.Schedule, written by client/status_schedule.go).
//
// The only request that may write a schedule key is PlainPutUnlessExists
// of the next version (WritesStatusScheduleKey: the server refuses every
// other write of the prefix before evaluation). Under a write latch on the
// whole prefix, evaluation reads the newest version and:
//
//   - a put of a version at or below the newest (one another writer won,
//     or one pruned since) writes nothing and answers like a lost
//     put-unless-exists: the existing value, or the newest version's if
//     that version is gone, so the writer reads the newest and tries again;
//   - a put that skips versions, that does not decode (an unknown
//     encoding), or whose schedule may not follow the newest
//     (txnstatus.CheckNext: cutovers strictly increasing, above the
//     newest's valid-through and above Context.ScheduleTs, no era removed
//     or altered, valid-through never back) is INVALID_ARGUMENT, naming
//     the problem;
//   - a valid put writes the version and deletes the versions that are
//     StatusScheduleVersionsKept or more below it (at most
//     StatusSchedulePruneMax a write); they would otherwise pile up at
//     one a client extension (about one per 2.5 minutes with the
//     defaults), forever. No reader or writer can need a pruned version:
//     every version holds the whole schedule (all eras and the
//     valid-through), so the newest answers all an older one could;
//     readers (client.readSchedule) read only the newest; and a writer
//     whose newest is stale puts a version at or below the stored newest,
//     which is answered as a lost race whether that version is stored or
//     pruned, so no stale writer can write a pruned version again and
//     fork the schedule. The newest version is never pruned.
//
// Version 0 is implicit (no record): the cluster's bootstrap encoding from
// 0, valid through 0, read from the cluster settings in the same range.

// StatusScheduleVersionsKept is how many of the newest schedule versions
// stay stored; older ones are deleted by the write of a new version. Only
// the newest is ever read; the others are kept for inspection.
const StatusScheduleVersionsKept = 8

// StatusSchedulePruneMax bounds the versions one schedule write deletes
// (a cluster that ran before pruning existed sheds its backlog this many
// at a time).
const StatusSchedulePruneMax = 64

// IsStatusScheduleKey reports whether key is under keys.StatusSchedulePrefix.
func IsStatusScheduleKey(key []byte) bool { return bytes.HasPrefix(key, keys.StatusSchedulePrefix) }

// WritesStatusScheduleKey reports whether the write request ru writes a
// key under keys.StatusSchedulePrefix with a request other than
// PlainPutUnlessExists, which the server refuses.
func WritesStatusScheduleKey(ru *rpcpb.RequestUnion) bool {
	if !ru.IsWrite() || ru.GetPlainPutUnlessExists() != nil {
		return false
	}
	if IsStatusScheduleKey(ru.Key()) {
		return true
	}
	var ws []*rpcpb.OnePCWrite
	if c := ru.GetCommitOnePc(); c != nil {
		ws = c.GetWrites()
	} else if p := ru.GetPrepare(); p != nil {
		ws = p.GetWrites()
	}
	for _, w := range ws {
		if IsStatusScheduleKey(w.GetKey()) {
			return true
		}
	}
	return false
}

// HasStatusScheduleWrite reports whether the batch puts a schedule
// version: then the leaseholder takes Context.ScheduleTs.
func HasStatusScheduleWrite(req *rpcpb.BatchRequest) bool {
	for _, ru := range req.GetRequests() {
		if p := ru.GetPlainPutUnlessExists(); p != nil && IsStatusScheduleKey(p.GetKey()) {
			return true
		}
	}
	return false
}

// declareStatusSchedule latches a schedule write: the whole prefix (it
// reads the newest version and prunes old ones) and the cluster settings
// (version 0's encoding).
func declareStatusSchedule(add func(concurrency.LatchSpan)) {
	add(spanOf(keys.StatusSchedulePrefix, keys.StatusScheduleEnd, concurrency.Write))
	add(pointSpan(keys.ClusterSettingsKey, concurrency.Read))
}

func evalStatusSchedulePut(c Context, rw storage.ReadWriter, p *rpcpb.PlainPutUnlessExistsRequest) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	answer := func(ok bool, existing []byte) (*rpcpb.ResponseUnion, *rpcpb.Error) {
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsResponse{Succeeded: ok, Existing: existing}}}, nil
	}
	invalid := func(format string, args ...any) (*rpcpb.ResponseUnion, *rpcpb.Error) {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "status encoding schedule: "+format, args...)
	}
	version, err := keys.StatusScheduleVersion(p.Key)
	if err != nil {
		return invalid("%v", err)
	}
	if version == 0 {
		return invalid("version 0 is implicit (the bootstrap encoding) and is never written")
	}
	newest, newestValue, err := newestStatusSchedule(rw)
	if err != nil {
		return nil, Error(err)
	}
	if version <= newest {
		existing, found, err := mvcc.GetPlain(rw, p.Key)
		if err != nil {
			return nil, Error(err)
		}
		if !found {
			existing = newestValue // pruned: the writer must start from the newest
		}
		return answer(false, existing)
	}
	if version != newest+1 {
		return invalid("version %d skips versions: the newest is %d, so the next is %d", version, newest, newest+1)
	}
	next, err := txnstatus.DecodeSchedule(p.Value)
	if err != nil {
		return invalid("version %d: %v", version, err)
	}
	var prev txnstatus.Schedule
	if newest == 0 {
		if prev, err = bootstrapSchedule(rw); err != nil {
			return invalid("%v", err)
		}
	} else if prev, err = txnstatus.DecodeSchedule(newestValue); err != nil {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INTERNAL, "status encoding schedule version %d: %v", newest, err)
	}
	if err := txnstatus.CheckNext(prev, next, c.ScheduleTs); err != nil {
		return invalid("version %d may not follow version %d: %v", version, newest, err)
	}
	if err := mvcc.PutPlain(rw, p.Key, p.Value); err != nil {
		return nil, Error(err)
	}
	if version > StatusScheduleVersionsKept {
		// Versions sort newest first: those from version-Kept down.
		old, _, err := mvcc.ScanPlain(rw, keys.StatusScheduleKey(version-StatusScheduleVersionsKept), keys.StatusScheduleEnd, StatusSchedulePruneMax)
		if err != nil {
			return nil, Error(err)
		}
		for _, kv := range old {
			if err := mvcc.DeletePlain(rw, kv.Key); err != nil {
				return nil, Error(err)
			}
		}
	}
	return answer(true, nil)
}

// newestStatusSchedule returns the newest stored version and its value;
// version 0 and no value if none is stored.
func newestStatusSchedule(r storage.Reader) (uint64, []byte, error) {
	kvs, _, err := mvcc.ScanPlain(r, keys.StatusSchedulePrefix, keys.StatusScheduleEnd, 1)
	if err != nil || len(kvs) == 0 {
		return 0, nil, err
	}
	v, err := keys.StatusScheduleVersion(kvs[0].Key)
	if err != nil {
		return 0, nil, fmt.Errorf("status encoding schedule: %w", err)
	}
	return v, kvs[0].Value, nil
}

// bootstrapSchedule is version 0: the encoding the cluster settings name,
// from 0, valid through 0.
func bootstrapSchedule(r storage.Reader) (txnstatus.Schedule, error) {
	b, found, err := mvcc.GetPlain(r, keys.ClusterSettingsKey)
	if err != nil {
		return txnstatus.Schedule{}, err
	}
	if !found {
		return txnstatus.Schedule{}, fmt.Errorf("this range holds no cluster settings")
	}
	var s rpcpb.ClusterSettings
	if err := proto.Unmarshal(b, &s); err != nil {
		return txnstatus.Schedule{}, fmt.Errorf("cluster settings: %v", err)
	}
	if !s.GetStatusEncodingSchedule() {
		return txnstatus.Schedule{}, fmt.Errorf("this cluster was bootstrapped before the status encoding schedule existed: its status encoding is fixed")
	}
	name := s.GetStatusEncoding()
	if name == "" {
		name = "tickets" // bootstrapped before encodings were recorded (client.statusEncodingFor)
	}
	enc, err := txnstatus.Named(name, s.GetTicketsPartitioningQuantum(), s.GetTicketsRowsPerQuantum())
	if err != nil {
		return txnstatus.Schedule{}, fmt.Errorf("cluster settings: %v", err)
	}
	return txnstatus.NewSchedule(enc, 0), nil
}
