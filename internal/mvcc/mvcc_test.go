package mvcc

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/canopy-db/canopy/internal/storage"
)

// newTestEngine opens an engine on an in-memory file system.
func newTestEngine(t testing.TB) *storage.Engine {
	t.Helper()
	e, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestDataDriven runs the files in testdata/. Each file opens with a
// sentence saying what it tests. Commands (keys are strings, or hex after
// "hex:"; timestamps are integers):
//
//	put-intent k= start= [v=] [delete] [hb=]    PutIntent
//	put k= ts= [v=] [delete]                    PutCommitted
//	resolve k= start= [commit=]                 ResolveIntent (no commit: abort)
//	get k= [ts=] [txn=]                         Get
//	get-intent k=                               GetIntent
//	scan [start=] [end=] [ts=] [txn=] [limit=] [max-bytes=]
//	refresh start= [end=] from= to= [txn=]      Refresh
//	plain-put k= v= / plain-delete k= / plain-get k=
//	plain-put-unless-exists k= v=
//	plain-scan [start=] [end=] [limit=]
//	gc [start=] [end=] threshold= [max=]        GCLimited
//	clear [start=] [end=]                       ClearSpan
//	dump                                        every physical key, decoded
//	reset                                       a fresh engine
//
// Writes run in one indexed batch per command, committed only on success.
func TestDataDriven(t *testing.T) {
	// The files directly in testdata/; testdata/fuzz holds the fuzzers'
	// corpora.
	paths, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			e := newTestEngine(t)
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Cmd == "reset" {
					e = newTestEngine(t)
					return "ok"
				}
				return runCmd(t, e, d)
			})
		})
	}
}

func runCmd(t *testing.T, e *storage.Engine, d *datadriven.TestData) string {
	b := e.NewBatch()
	defer b.Close()
	out, err := evalCmd(t, b, d)
	if err != nil {
		return formatErr(err)
	}
	if !b.Empty() {
		if err := b.Commit(false); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	return out
}

func evalCmd(t *testing.T, b *storage.Batch, d *datadriven.TestData) (string, error) {
	key := func(name string) []byte { return argKey(t, d, name) }
	ts := func(name string) uint64 {
		var v uint64
		if d.HasArg(name) {
			d.ScanArgs(t, name, &v)
		}
		return v
	}
	num := func(name string) int {
		var v int
		if d.HasArg(name) {
			d.ScanArgs(t, name, &v)
		}
		return v
	}
	switch d.Cmd {
	case "put-intent":
		txn := TxnMeta{StartTs: ts("start")}
		if d.HasArg("hb") {
			txn.HeartbeatKey = key("hb")
		}
		return "ok", PutIntent(b, key("k"), key("v"), d.HasArg("delete"), txn)
	case "put":
		return "ok", PutCommitted(b, key("k"), key("v"), d.HasArg("delete"), ts("ts"))
	case "resolve":
		resolved, err := ResolveIntent(b, key("k"), ts("start"), ts("commit"))
		return fmt.Sprintf("resolved=%t", resolved), err
	case "get":
		v, vts, found, err := Get(b, key("k"), ts("ts"), ts("txn"))
		if !found {
			return fmt.Sprintf("not found (ts=%d)", vts), err
		}
		return fmt.Sprintf("%q @%d", v, vts), err
	case "get-intent":
		iv, found, err := GetIntent(b, key("k"))
		if !found {
			return "no intent", err
		}
		return formatIntentValue(iv), err
	case "scan":
		kvs, resume, err := Scan(b, key("start"), key("end"), ts("ts"), ts("txn"), num("limit"), num("max-bytes"))
		return formatKVs(kvs, resume), err
	case "refresh":
		return "ok", Refresh(b, key("start"), key("end"), ts("from"), ts("to"), ts("txn"))
	case "plain-put":
		return "ok", PutPlain(b, key("k"), key("v"))
	case "plain-delete":
		return "ok", DeletePlain(b, key("k"))
	case "plain-get":
		v, found, err := GetPlain(b, key("k"))
		if !found {
			return "not found", err
		}
		return fmt.Sprintf("%q", v), err
	case "plain-put-unless-exists":
		ok, existing, err := PutPlainUnlessExists(b, key("k"), key("v"))
		if ok {
			return "ok", err
		}
		return fmt.Sprintf("exists: %q", existing), err
	case "plain-scan":
		kvs, resume, err := ScanPlain(b, key("start"), key("end"), num("limit"))
		return formatKVs(kvs, resume), err
	case "gc":
		n, resume, err := GCLimited(b, key("start"), key("end"), ts("threshold"), num("max"))
		out := fmt.Sprintf("deleted=%d", n)
		if resume != nil {
			out += fmt.Sprintf(" resume=%q", resume)
		}
		return out, err
	case "clear":
		return "ok", ClearSpan(b, key("start"), key("end"))
	case "dump":
		return dump(t, b), nil
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		return "", nil
	}
}

// argKey returns the bytes of a key or value argument: nil when absent,
// hex-decoded after "hex:", else the string itself.
func argKey(t *testing.T, d *datadriven.TestData, name string) []byte {
	if !d.HasArg(name) {
		return nil
	}
	var s string
	d.ScanArgs(t, name, &s)
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Pos, name, err)
		}
		return b
	}
	return []byte(s)
}

func formatErr(err error) string {
	var wc *WriteConflictError
	var ie *IntentError
	var rc *ReadConflictError
	switch {
	case errors.As(err, &wc):
		if wc.Intent != nil {
			return fmt.Sprintf("write conflict: key=%q intent=%s", wc.Key, formatIntent(*wc.Intent))
		}
		return fmt.Sprintf("write conflict: key=%q existing_ts=%d", wc.Key, wc.ExistingTs)
	case errors.As(err, &ie):
		var parts []string
		for _, in := range ie.Intents {
			parts = append(parts, formatIntent(in))
		}
		return "intents found: " + strings.Join(parts, " ")
	case errors.As(err, &rc):
		if rc.Intent != nil {
			return fmt.Sprintf("read conflict: key=%q intent=%s", rc.Key, formatIntent(*rc.Intent))
		}
		return fmt.Sprintf("read conflict: key=%q ts=%d", rc.Key, rc.Ts)
	case errors.Is(err, ErrInvalidArgument):
		return "invalid argument: " + err.Error()
	case errors.Is(err, ErrInvariant):
		return "invariant: " + err.Error()
	case errors.Is(err, storage.ErrCorruption):
		return "corruption: " + err.Error()
	default:
		return "error: " + err.Error()
	}
}

func formatIntent(in Intent) string {
	s := fmt.Sprintf("%q@txn%d", in.Key, in.Txn.StartTs)
	if in.Txn.HeartbeatKey != nil {
		s += fmt.Sprintf("(hb=%q)", in.Txn.HeartbeatKey)
	}
	return s
}

func formatIntentValue(iv IntentValue) string {
	s := fmt.Sprintf("txn%d", iv.Txn.StartTs)
	if iv.Txn.HeartbeatKey != nil {
		s += fmt.Sprintf(" hb=%q", iv.Txn.HeartbeatKey)
	}
	if iv.IsDelete {
		return s + " <tombstone>"
	}
	return s + fmt.Sprintf(" %q", iv.Value)
}

func formatKVs(kvs []KV, resume []byte) string {
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%q: %q @%d\n", kv.Key, kv.Value, kv.Ts)
	}
	if len(kvs) == 0 {
		b.WriteString("<empty>\n")
	}
	if resume != nil {
		fmt.Fprintf(&b, "resume: %q\n", resume)
	}
	return b.String()
}

// dump prints every physical data key, decoded, in physical order.
func dump(t *testing.T, r storage.Reader) string {
	var b strings.Builder
	err := IterateSpan(r, nil, nil, func(pk, v []byte) error {
		k, kind, ts, err := DecodeKey(pk)
		if err != nil {
			return err
		}
		switch kind {
		case KindPlain:
			fmt.Fprintf(&b, "%q plain %q\n", k, v)
		case KindIntent:
			iv, err := DecodeIntentValue(v)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%q intent %s\n", k, formatIntentValue(iv))
		case KindVersion:
			val, del, err := DecodeVersionValue(v)
			if err != nil {
				return err
			}
			if del {
				fmt.Fprintf(&b, "%q @%d <tombstone>\n", k, ts)
			} else {
				fmt.Fprintf(&b, "%q @%d %q\n", k, ts, val)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	if b.Len() == 0 {
		return "<empty>"
	}
	return b.String()
}
