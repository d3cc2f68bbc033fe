package storage

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/vlog"
	"github.com/cockroachdb/pebble/v2"
)

// batchOp is one operation of a batch being committed by commitSeparated.
type batchOp struct {
	kind       pebble.InternalKeyKind
	key, value []byte // alias the batch's representation
	// sep: the value goes to a blob file; ptr is set by appendValues.
	sep bool
	ptr vlog.Pointer
}

// commitSeparated commits a batch that writes data keys while value
// separation or discard accounting is in force. Steps, in the order that
// makes them safe:
//
//  1. Read the batch. A Set of a data key is separated if its value reaches
//     the threshold and it is the last operation on its key with no range
//     deletion after it (an earlier, shadowed Set stays inline, so a batch
//     never creates garbage in a blob file).
//  2. Lock the stripes of the keys written (all stripes for a range
//     deletion): from here to the commit nobody else changes them.
//  3. Read the current value of every key written, and scan every deleted
//     range, for pointers: each is a record that dies with this batch, and
//     its size is added to its file's discard counter, once per key.
//  4. Append the separated values to the blob file and sync it: the records
//     are durable before the pointers (vlog contract 1).
//  5. Commit one Pebble batch holding the operations (pointers in place of
//     separated values) and the discard counter deltas: the version dies
//     and its garbage is counted in the same atomic write.
func (e *Engine) commitSeparated(b *Batch, sync bool) (retErr error) {
	r := b.b.Reader()
	var ops []batchOp
	lastOp := map[string]int{}
	lastRangeDel := -1
	var pointKeys [][]byte
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return fmt.Errorf("storage: read batch: %w", err)
		}
		if !ok {
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindDelete, pebble.InternalKeyKindDeleteSized:
			if isDataKey(k) {
				lastOp[string(k)] = len(ops)
				pointKeys = append(pointKeys, k)
			}
		case pebble.InternalKeyKindRangeDelete:
			if overlapsData(k, v) {
				lastRangeDel = len(ops)
			}
		default:
			return fmt.Errorf("storage: batch operation kind %v not supported", kind)
		}
		ops = append(ops, batchOp{kind: kind, key: k, value: v})
	}
	anySep := false
	if e.opts.Mode.separates() {
		for i := range ops {
			o := &ops[i]
			if o.kind == pebble.InternalKeyKindSet && isDataKey(o.key) && len(o.value)-1 >= e.opts.ThresholdBytes &&
				lastOp[string(o.key)] == i && i > lastRangeDel {
				o.sep, anySep = true, true
			}
		}
	}

	unlock := e.lockStripes(pointKeys, lastRangeDel >= 0)
	defer unlock()

	discard := map[uint64]int64{}
	var dead []vlog.Pointer
	killed := map[string]bool{}
	kill := func(key, stored []byte) error {
		if killed[string(key)] {
			return nil
		}
		killed[string(key)] = true
		p, isPtr, err := decodeStoredPointer(stored)
		if err != nil || !isPtr {
			return err
		}
		discard[p.File] += vlog.RecordBytes(len(key), int(p.ValueBytes))
		dead = append(dead, p)
		return nil
	}
	for k := range lastOp {
		stored, closer, err := e.db.Get([]byte(k))
		if errors.Is(err, pebble.ErrNotFound) {
			killed[k] = true
			continue
		}
		if err != nil {
			return fmt.Errorf("storage: read old value: %w", err)
		}
		err = kill([]byte(k), stored)
		_ = closer.Close()
		if err != nil {
			return err
		}
	}
	for _, o := range ops {
		if o.kind != pebble.InternalKeyKindRangeDelete || !overlapsData(o.key, o.value) {
			continue
		}
		if err := e.scanKilled(o.key, o.value, kill); err != nil {
			return err
		}
	}

	if anySep {
		num, err := e.blobs.appendValues(ops)
		defer func() {
			if rerr := e.blobs.releaseFile(num); rerr != nil && retErr == nil {
				retErr = rerr
			}
		}()
		if err != nil {
			return err
		}
		hook("commit:blobs-synced")
	}

	nb := e.db.NewBatch()
	defer nb.Close()
	var ptrBuf []byte
	for _, o := range ops {
		var err error
		switch o.kind {
		case pebble.InternalKeyKindSet:
			v := o.value
			if o.sep {
				ptrBuf = o.ptr.Append(append(ptrBuf[:0], tagPointer))
				v = ptrBuf
			}
			err = nb.Set(o.key, v, nil)
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindDeleteSized:
			err = nb.Delete(o.key, nil)
		case pebble.InternalKeyKindRangeDelete:
			err = nb.DeleteRange(o.key, o.value, nil)
		}
		if err != nil {
			return err
		}
	}
	for num, n := range discard {
		if err := nb.Merge(discardKey(num), encodeCounter(n), nil); err != nil {
			return err
		}
	}
	if err := nb.Commit(e.writeOpts(sync)); err != nil {
		return err
	}
	if len(discard) > 0 {
		e.blobs.addDiscard(discard, dead)
		e.gc.kick()
	}
	return nil
}

// scanKilled calls kill for every data key in [start, end) of the LSM.
func (e *Engine) scanKilled(start, end []byte, kill func(key, stored []byte) error) error {
	lo, hi := start, end
	if bytes.Compare(lo, []byte{PrefixData}) < 0 {
		lo = []byte{PrefixData}
	}
	if dEnd := DataSpanEnd(); bytes.Compare(hi, dEnd) > 0 {
		hi = dEnd
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := kill(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Error()
}
