package mvcc

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/canopy-db/canopy/internal/storage"
)

// The randomized test runs one seeded stream of operations against the
// package and against a plain in-memory twin (model) that implements the
// documented rules in the most direct way, and compares every result and,
// every few operations, the whole stored state.

var (
	modelSeed = flag.Uint64("mvcc.seed", 0, "seed of TestAgainstModel (0: pick one and print it)")
	modelOps  = flag.Int("mvcc.ops", 3000, "operations per TestAgainstModel run")
)

type modelVersion struct {
	value    []byte
	isDelete bool
}

type modelKey struct {
	plain    []byte // nil: none (an empty plain value is []byte{})
	intent   *IntentValue
	versions map[uint64]modelVersion
}

func (mk *modelKey) hasMVCC() bool { return mk.intent != nil || len(mk.versions) > 0 }

// newest returns the newest version at or below ts (ok false if none).
func (mk *modelKey) newest(ts uint64) (uint64, modelVersion, bool) {
	var best uint64
	for vts := range mk.versions {
		if vts <= ts && vts > best {
			best = vts
		}
	}
	if best == 0 {
		return 0, modelVersion{}, false
	}
	return best, mk.versions[best], true
}

type model struct{ keys map[string]*modelKey }

func (m *model) key(k []byte) *modelKey {
	mk := m.keys[string(k)]
	if mk == nil {
		mk = &modelKey{versions: map[uint64]modelVersion{}}
		m.keys[string(k)] = mk
	}
	return mk
}

func (m *model) clone() *model {
	c := &model{keys: map[string]*modelKey{}}
	for k, mk := range m.keys {
		cm := &modelKey{plain: mk.plain, versions: map[uint64]modelVersion{}}
		if mk.intent != nil {
			iv := *mk.intent
			cm.intent = &iv
		}
		for ts, v := range mk.versions {
			cm.versions[ts] = v
		}
		c.keys[k] = cm
	}
	return c
}

// sortedKeys returns the logical keys in [start, end) (end nil: no bound)
// that satisfy keep, in order.
func (m *model) sortedKeys(start, end []byte, keep func(*modelKey) bool) []string {
	var out []string
	for k, mk := range m.keys {
		if bytes.Compare([]byte(k), start) >= 0 && (len(end) == 0 || bytes.Compare([]byte(k), end) < 0) && keep(mk) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

type modelRead struct {
	value  []byte
	ts     uint64
	found  bool
	intent *Intent
}

func (m *model) read(k []byte, ts, txn uint64) modelRead {
	mk := m.key(k)
	if in := mk.intent; in != nil {
		if txn != 0 && in.Txn.StartTs == txn {
			if in.IsDelete {
				return modelRead{}
			}
			return modelRead{value: in.Value, ts: txn, found: true}
		}
		if ts == 0 || in.Txn.StartTs <= ts {
			return modelRead{intent: &Intent{Key: k, Txn: in.Txn}}
		}
	}
	readTs := ts
	if ts == 0 {
		readTs = math.MaxUint64
	}
	vts, v, ok := mk.newest(readTs)
	if !ok {
		return modelRead{}
	}
	if v.isDelete {
		return modelRead{ts: vts}
	}
	return modelRead{value: v.value, ts: vts, found: true}
}

func (m *model) get(k []byte, ts, txn uint64) ([]byte, uint64, bool, error) {
	r := m.read(k, ts, txn)
	if r.intent != nil {
		return nil, 0, false, &IntentError{Intents: []Intent{*r.intent}}
	}
	return r.value, r.ts, r.found, nil
}

func (m *model) scan(start, end []byte, ts, txn uint64, limit, maxBytes int) ([]KV, []byte, error) {
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return nil, nil, ErrInvalidArgument
	}
	var kvs []KV
	var intents []Intent
	bytesRead := 0
	var resume []byte
	for _, k := range m.sortedKeys(start, end, (*modelKey).hasMVCC) {
		if (limit > 0 && len(kvs) >= limit) || (maxBytes > 0 && bytesRead >= maxBytes) {
			resume = []byte(k)
			break
		}
		r := m.read([]byte(k), ts, txn)
		if r.intent != nil {
			intents = append(intents, *r.intent)
			if len(intents) >= ScanIntentsMax {
				break
			}
		} else if r.found {
			kvs = append(kvs, KV{Key: []byte(k), Value: r.value, Ts: r.ts})
			bytesRead += len(k) + len(r.value)
		}
	}
	if len(intents) > 0 {
		return nil, nil, &IntentError{Intents: intents}
	}
	return kvs, resume, nil
}

func (m *model) putIntent(k, v []byte, del bool, txn TxnMeta) error {
	if txn.StartTs == 0 || (del && len(v) != 0) {
		return ErrInvalidArgument
	}
	mk := m.key(k)
	if mk.intent != nil && mk.intent.Txn.StartTs != txn.StartTs {
		return &WriteConflictError{Key: k, Intent: &Intent{Key: k, Txn: mk.intent.Txn}}
	}
	if vts, _, ok := mk.newest(math.MaxUint64); ok && vts > txn.StartTs {
		return &WriteConflictError{Key: k, ExistingTs: vts}
	}
	if del {
		v = nil
	}
	mk.intent = &IntentValue{Txn: txn, Value: v, IsDelete: del}
	return nil
}

func (m *model) resolve(k []byte, start, commit uint64) (bool, error) {
	if start == 0 || (commit != 0 && commit < start) {
		return false, ErrInvalidArgument
	}
	mk := m.key(k)
	if mk.intent == nil || mk.intent.Txn.StartTs != start {
		return false, nil
	}
	if commit != 0 {
		if vts, _, ok := mk.newest(math.MaxUint64); ok && vts >= commit {
			return false, ErrInvariant
		}
		mk.versions[commit] = modelVersion{value: mk.intent.Value, isDelete: mk.intent.IsDelete}
	}
	mk.intent = nil
	return true, nil
}

func (m *model) put(k, v []byte, del bool, ts uint64) error {
	if ts == 0 || (del && len(v) != 0) {
		return ErrInvalidArgument
	}
	mk := m.key(k)
	if mk.intent != nil {
		return &IntentError{Intents: []Intent{{Key: k, Txn: mk.intent.Txn}}}
	}
	if vts, _, ok := mk.newest(math.MaxUint64); ok && vts >= ts {
		return &WriteConflictError{Key: k, ExistingTs: vts}
	}
	mk.versions[ts] = modelVersion{value: v, isDelete: del}
	return nil
}

func (m *model) refresh(start, end []byte, from, to, txn uint64) error {
	var ks []string
	if len(end) == 0 {
		ks = m.sortedKeys(start, append(slices.Clone(start), 0), (*modelKey).hasMVCC)
	} else {
		if bytes.Compare(start, end) > 0 {
			return ErrInvalidArgument
		}
		ks = m.sortedKeys(start, end, (*modelKey).hasMVCC)
	}
	for _, k := range ks {
		mk := m.keys[k]
		if mk.intent != nil && mk.intent.Txn.StartTs != txn {
			return &ReadConflictError{Key: []byte(k), Intent: &Intent{Key: []byte(k), Txn: mk.intent.Txn}}
		}
		if to > from {
			if vts, _, ok := mk.newest(to); ok && vts > from {
				return &ReadConflictError{Key: []byte(k), Ts: vts}
			}
		}
	}
	return nil
}

func (m *model) putPlainUnlessExists(k, v []byte) (bool, []byte) {
	mk := m.key(k)
	if mk.plain != nil {
		return false, mk.plain
	}
	mk.plain = append([]byte{}, v...)
	return true, nil
}

func (m *model) scanPlain(start, end []byte, limit int) ([]KV, []byte, error) {
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return nil, nil, ErrInvalidArgument
	}
	var kvs []KV
	for _, k := range m.sortedKeys(start, end, func(mk *modelKey) bool { return mk.plain != nil }) {
		if limit > 0 && len(kvs) >= limit {
			return kvs, []byte(k), nil
		}
		kvs = append(kvs, KV{Key: []byte(k), Value: m.keys[k].plain})
	}
	return kvs, nil, nil
}

func (m *model) gc(start, end []byte, threshold uint64, versionsMax int) (int, []byte, error) {
	if threshold == 0 {
		return 0, nil, nil
	}
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return 0, nil, ErrInvalidArgument
	}
	deleted := 0
	full := func() bool { return versionsMax > 0 && deleted >= versionsMax }
	for _, k := range m.sortedKeys(start, end, func(mk *modelKey) bool { return len(mk.versions) > 0 }) {
		mk := m.keys[k]
		keepTs, keep, ok := mk.newest(threshold)
		if !ok {
			continue
		}
		var older []uint64
		for vts := range mk.versions {
			if vts < keepTs {
				older = append(older, vts)
			}
		}
		slices.Sort(older)
		slices.Reverse(older) // newest first, as the engine iterates
		for _, vts := range older {
			if full() {
				return deleted, []byte(k), nil
			}
			delete(mk.versions, vts)
			deleted++
		}
		if keep.isDelete {
			if full() {
				return deleted, []byte(k), nil
			}
			delete(mk.versions, keepTs)
			deleted++
		}
	}
	return deleted, nil, nil
}

func (m *model) clearSpan(start, end []byte) error {
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return ErrInvalidArgument
	}
	for _, k := range m.sortedKeys(start, end, func(*modelKey) bool { return true }) {
		delete(m.keys, k)
	}
	return nil
}

// physical renders the model as the physical key-value pairs the engine
// must hold, in physical order.
func (m *model) physical() []string {
	type pair struct{ k, v []byte }
	var pairs []pair
	for k, mk := range m.keys {
		lk := []byte(k)
		if mk.plain != nil {
			pairs = append(pairs, pair{PlainKey(lk), mk.plain})
		}
		if mk.intent != nil {
			pairs = append(pairs, pair{IntentKey(lk), EncodeIntentValue(*mk.intent)})
		}
		for ts, v := range mk.versions {
			pairs = append(pairs, pair{VersionKey(lk, ts), EncodeVersionValue(v.value, v.isDelete)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return bytes.Compare(pairs[i].k, pairs[j].k) < 0 })
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = fmt.Sprintf("%x=%x", p.k, p.v)
	}
	return out
}

func enginePhysical(t *testing.T, r storage.Reader) []string {
	var out []string
	if err := IterateSpan(r, nil, nil, func(k, v []byte) error {
		out = append(out, fmt.Sprintf("%x=%x", k, v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// classify renders an error for comparison: the protocol errors with
// their fields, the sentinels by name.
func classify(err error) string {
	switch {
	case err == nil:
		return "<nil>"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid argument"
	case errors.Is(err, ErrInvariant):
		return "invariant"
	default:
		return formatErr(err)
	}
}

func TestAgainstModel(t *testing.T) {
	seed := *modelSeed
	runs := 4
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	} else {
		runs = 1
	}
	// The same stream runs under each storage mode, with a tiny separation
	// threshold so that most values go to blob files: the package must not
	// depend on where the engine keeps values.
	modes := []storage.Mode{storage.ModeInline, storage.ModeRewrite, storage.ModePunch}
	for i := range runs {
		s := seed + uint64(i)
		for _, mode := range modes {
			t.Run(fmt.Sprintf("seed=%d/mode=%s", s, mode), func(t *testing.T) {
				t.Logf("seed %d (rerun with -mvcc.seed=%d)", s, s)
				opts := storage.Options{FS: vfs.NewMem(), Mode: mode, ThresholdBytes: 8}
				runAgainstModel(t, s, *modelOps, opts)
			})
		}
	}
}

func runAgainstModel(t *testing.T, seed uint64, ops int, opts storage.Options) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	e, err := storage.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	m := &model{keys: map[string]*modelKey{}}
	keysPool := [][]byte{
		{}, []byte("a"), []byte("a\x00"), []byte("a\x00\x00"), []byte("a\x00\xff"), []byte("a\x01"),
		[]byte("ab"), []byte("b"), []byte("\x00"), []byte("\x00\x01"), []byte("\xff"), []byte("c"),
	}
	randKey := func() []byte { return slices.Clone(keysPool[rng.IntN(len(keysPool))]) }
	randBound := func() []byte {
		if rng.IntN(4) == 0 {
			return nil
		}
		return randKey()
	}
	randTs := func() uint64 {
		if rng.IntN(30) == 0 {
			return 0
		}
		return 1 + rng.Uint64N(40)
	}
	randValue := func() []byte {
		switch rng.IntN(8) {
		case 0:
			return []byte{}
		case 1:
			return bytes.Repeat([]byte{byte('A' + rng.IntN(26))}, 1+rng.IntN(100))
		}
		return []byte(fmt.Sprintf("v%d", rng.IntN(1000)))
	}
	fail := func(op int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, op %d: %s", seed, op, fmt.Sprintf(format, args...))
	}
	check := func(op int, what string, got, want any, gotErr, wantErr error) {
		t.Helper()
		if g, w := classify(gotErr), classify(wantErr); g != w {
			fail(op, "%s: error %s, model %s", what, g, w)
		}
		if gotErr == nil {
			if g, w := fmt.Sprintf("%q", got), fmt.Sprintf("%q", want); g != w {
				fail(op, "%s:\n got   %s\n model %s", what, g, w)
			}
		}
	}

	// Writes accumulate in one indexed batch, as at Raft apply, which is
	// written to the engine every few operations. The model's state as of
	// the last write is kept so that a dropped batch can be checked too.
	b := e.NewBatch()
	committed := m.clone()
	for op := 0; op < ops; op++ {
		var r storage.Reader = b
		switch x := rng.IntN(100); {
		case x < 15:
			k, v, del := randKey(), randValue(), rng.IntN(4) == 0
			if del && rng.IntN(10) != 0 {
				v = nil
			}
			txn := TxnMeta{StartTs: randTs()}
			if rng.IntN(2) == 0 {
				txn.HeartbeatKey = []byte(fmt.Sprintf("hb%d", txn.StartTs))
			}
			what := fmt.Sprintf("PutIntent(%q, %q, %t, %d)", k, v, del, txn.StartTs)
			check(op, what, nil, nil, PutIntent(b, k, v, del, txn), m.putIntent(k, v, del, txn))
		case x < 27:
			k, start := randKey(), randTs()
			commit := uint64(0)
			if rng.IntN(4) != 0 {
				commit = start + rng.Uint64N(10)
				if rng.IntN(20) == 0 {
					commit = randTs()
				}
			}
			// Most of the time resolve an intent that exists.
			if mk := m.keys[string(k)]; mk != nil && mk.intent != nil && rng.IntN(3) != 0 {
				start = mk.intent.Txn.StartTs
				if commit != 0 {
					commit = start + rng.Uint64N(10)
				}
			}
			got, err := ResolveIntent(b, k, start, commit)
			want, werr := m.resolve(k, start, commit)
			check(op, fmt.Sprintf("ResolveIntent(%q, %d, %d)", k, start, commit), got, want, err, werr)
		case x < 37:
			k, v, del, ts := randKey(), randValue(), rng.IntN(4) == 0, randTs()
			if del {
				v = nil
			}
			check(op, fmt.Sprintf("PutCommitted(%q, %q, %t, %d)", k, v, del, ts), nil, nil,
				PutCommitted(b, k, v, del, ts), m.put(k, v, del, ts))
		case x < 52:
			if rng.IntN(3) == 0 {
				commitBatch(t, b)
				b = e.NewBatch()
				committed = m.clone()
				r = e
			}
			k, ts, txn := randKey(), randTs(), randTs()
			if rng.IntN(2) == 0 {
				txn = 0
			}
			v, vts, found, err := Get(r, k, ts, txn)
			wv, wts, wfound, werr := m.get(k, ts, txn)
			check(op, fmt.Sprintf("Get(%q, %d, %d)", k, ts, txn),
				[]any{v, vts, found}, []any{wv, wts, wfound}, err, werr)
		case x < 62:
			start, end, ts, txn := randBound(), randBound(), randTs(), randTs()
			limit, maxBytes := rng.IntN(4), 0
			if rng.IntN(3) == 0 {
				maxBytes = rng.IntN(12)
			}
			kvs, resume, err := Scan(r, start, end, ts, txn, limit, maxBytes)
			wkvs, wresume, werr := m.scan(start, end, ts, txn, limit, maxBytes)
			check(op, fmt.Sprintf("Scan(%q, %q, %d, %d, %d, %d)", start, end, ts, txn, limit, maxBytes),
				[]any{kvs, resume}, []any{wkvs, wresume}, err, werr)
		case x < 70:
			start, end := randKey(), randBound()
			from, to, txn := randTs(), randTs(), randTs()
			check(op, fmt.Sprintf("Refresh(%q, %q, %d, %d, %d)", start, end, from, to, txn), nil, nil,
				Refresh(r, start, end, from, to, txn), m.refresh(start, end, from, to, txn))
		case x < 74:
			k, v := randKey(), randValue()
			check(op, "PutPlain", nil, nil, PutPlain(b, k, v), nil)
			m.key(k).plain = slices.Clone(v)
		case x < 76:
			k := randKey()
			check(op, "DeletePlain", nil, nil, DeletePlain(b, k), nil)
			m.key(k).plain = nil
		case x < 80:
			k, v := randKey(), randValue()
			ok, existing, err := PutPlainUnlessExists(b, k, v)
			wok, wexisting := m.putPlainUnlessExists(k, v)
			check(op, fmt.Sprintf("PutPlainUnlessExists(%q)", k), []any{ok, existing}, []any{wok, wexisting}, err, nil)
		case x < 84:
			k := randKey()
			v, found, err := GetPlain(r, k)
			mk := m.key(k)
			check(op, fmt.Sprintf("GetPlain(%q)", k), []any{v, found}, []any{mk.plain, mk.plain != nil}, err, nil)
		case x < 88:
			start, end, limit := randBound(), randBound(), rng.IntN(4)
			kvs, resume, err := ScanPlain(r, start, end, limit)
			wkvs, wresume, werr := m.scanPlain(start, end, limit)
			check(op, fmt.Sprintf("ScanPlain(%q, %q, %d)", start, end, limit), []any{kvs, resume}, []any{wkvs, wresume}, err, werr)
		case x < 95:
			start, end, thr, max := randBound(), randBound(), randTs(), rng.IntN(4)
			n, resume, err := GCLimited(b, start, end, thr, max)
			wn, wresume, werr := m.gc(start, end, thr, max)
			check(op, fmt.Sprintf("GCLimited(%q, %q, %d, %d)", start, end, thr, max), []any{n, resume}, []any{wn, wresume}, err, werr)
		case x < 96:
			start, end := randBound(), randBound()
			check(op, fmt.Sprintf("ClearSpan(%q, %q)", start, end), nil, nil, ClearSpan(b, start, end), m.clearSpan(start, end))
		case x < 98:
			// Drop the batch: the engine must still hold the last
			// committed state.
			b.Close()
			b = e.NewBatch()
			m = committed.clone()
		default:
			commitBatch(t, b)
			b = e.NewBatch()
			committed = m.clone()
		}
		if rng.IntN(10) == 0 || op == ops-1 {
			if got, want := enginePhysical(t, b), m.physical(); !slices.Equal(got, want) {
				fail(op, "stored state differs:\n got   %q\n model %q", got, want)
			}
		}
	}
	b.Close()
}

func commitBatch(t *testing.T, b *storage.Batch) {
	t.Helper()
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
}
