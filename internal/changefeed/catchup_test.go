package changefeed

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func openEngine(t *testing.T, mode storage.Mode) *storage.Engine {
	t.Helper()
	e, err := storage.Open("db", storage.Options{FS: vfs.NewMem(), Mode: mode, ThresholdBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func opString(op Op) string {
	k := strings.TrimPrefix(string(op.Key), "\x01")
	switch op.Kind {
	case OpIntent:
		return fmt.Sprintf("intent %s start %d hb %q", k, op.Ts, op.HeartbeatKey)
	case OpIntentGone:
		return "intent-gone " + k
	case OpValue:
		if op.Deleted {
			return fmt.Sprintf("value %s DELETE @%d", k, op.Ts)
		}
		return fmt.Sprintf("value %s=%d bytes @%d", k, len(op.Value), op.Ts)
	}
	return "?"
}

// TestDecodeOpsAndCatchUp writes MVCC history through the mvcc package,
// as evaluation does, and checks that DecodeOps reads back every change
// of each command's batch (plain and system keys left out), that CatchUp
// delivers the versions above a timestamp key by key in commit order
// (large values, kept in blob files, included), and that ScanIntents finds
// the unresolved intents.
func TestDecodeOpsAndCatchUp(t *testing.T) {
	for _, mode := range []storage.Mode{storage.ModeInline, storage.ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			e := openEngine(t, mode)
			u := func(s string) []byte { return keys.UserKey([]byte(s)) }
			big := bytes.Repeat([]byte("b"), 1000)
			commands := []struct {
				write func(b *storage.Batch) error
				want  []string
			}{
				{func(b *storage.Batch) error {
					if err := mvcc.PutCommitted(b, u("a"), []byte("a1"), false, 10); err != nil {
						return err
					}
					if err := mvcc.PutCommitted(b, u("c"), big, false, 10); err != nil {
						return err
					}
					return mvcc.PutPlain(b, keys.HeartbeatKey(5), []byte("hb")) // system key: no op
				}, []string{"value a=2 bytes @10", "value c=1000 bytes @10"}},
				{func(b *storage.Batch) error {
					if err := mvcc.PutIntent(b, u("a"), []byte("a2"), false, mvcc.TxnMeta{StartTs: 15, HeartbeatKey: []byte("h15")}); err != nil {
						return err
					}
					return mvcc.PutIntent(b, u("b"), nil, true, mvcc.TxnMeta{StartTs: 15, HeartbeatKey: []byte("h15")})
				}, []string{`intent a start 15 hb "h15"`, `intent b start 15 hb "h15"`}},
				{func(b *storage.Batch) error {
					if _, err := mvcc.ResolveIntent(b, u("a"), 15, 20); err != nil {
						return err
					}
					_, err := mvcc.ResolveIntent(b, u("b"), 15, 20)
					return err
				}, []string{"value a=2 bytes @20", "intent-gone a", "value b DELETE @20", "intent-gone b"}},
				{func(b *storage.Batch) error {
					return mvcc.PutIntent(b, u("c"), []byte("c2"), false, mvcc.TxnMeta{StartTs: 25})
				}, []string{`intent c start 25 hb ""`}},
				{func(b *storage.Batch) error {
					return mvcc.PutCommitted(b, u("a"), nil, true, 30)
				}, []string{"value a DELETE @30"}},
			}
			for i, c := range commands {
				b := e.NewBatch()
				if err := c.write(b); err != nil {
					t.Fatal(err)
				}
				ops, err := DecodeOps(e.ReadRepr, b.Repr())
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, op := range ops {
					got = append(got, opString(op))
				}
				if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
					t.Fatalf("command %d: ops\n%s\nwant\n%s", i, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
				}
				if err := b.Commit(true); err != nil {
					t.Fatal(err)
				}
				b.Close()
			}
			catchUp := func(from uint64) string {
				var out []string
				err := CatchUp(e, keys.UserPrefix, keys.UserEnd, from, func(ev Event) error {
					out = append(out, opString(Op{Kind: OpValue, Key: ev.Key, Ts: ev.Ts, Value: ev.Value, Deleted: ev.Deleted}))
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return strings.Join(out, ", ")
			}
			if got, want := catchUp(0), "value a=2 bytes @10, value a=2 bytes @20, value a DELETE @30, value b DELETE @20, value c=1000 bytes @10"; got != want {
				t.Fatalf("catch-up from 0:\n%s\nwant\n%s", got, want)
			}
			if got, want := catchUp(20), "value a DELETE @30"; got != want {
				t.Fatalf("catch-up from 20:\n%s\nwant\n%s", got, want)
			}
			intents, err := ScanIntents(e, keys.UserPrefix, keys.UserEnd)
			if err != nil {
				t.Fatal(err)
			}
			if len(intents) != 1 || string(intents[0].Key) != string(u("c")) || intents[0].StartTs != 25 {
				t.Fatalf("intents %+v, want c@25", intents)
			}
		})
	}
}

// TestDecodeOpsRefusesRangeDeletion: a command that deletes a range of
// user data cannot be followed change by change.
func TestDecodeOpsRefusesRangeDeletion(t *testing.T) {
	e := openEngine(t, storage.ModeInline)
	b := e.NewBatch()
	defer b.Close()
	if err := mvcc.ClearSpan(b, keys.UserKey([]byte("a")), keys.UserKey([]byte("b"))); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeOps(e.ReadRepr, b.Repr()); err == nil {
		t.Fatal("DecodeOps accepted a range deletion of user data")
	}
}
