package eval

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCommandTable checks that every request type has exactly one command
// and that the table agrees with rpcpb's read/write classification.
func TestCommandTable(t *testing.T) {
	for m := rpcpb.MethodNone + 1; m < rpcpb.MethodsMax; m++ {
		c := commands[m]
		if c == nil {
			t.Fatalf("%s has no command", m)
		}
		if c.Declare == nil {
			t.Errorf("%s declares no spans", m)
		}
	}
	examples := []*rpcpb.RequestUnion{
		{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{}}},
		{Value: &rpcpb.RequestUnion_Scan{Scan: &rpcpb.ScanRequest{}}},
		{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{}}},
		{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{}}},
		{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{}}},
		{Value: &rpcpb.RequestUnion_Refresh{Refresh: &rpcpb.RefreshRequest{}}},
		{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{}}},
		{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{}}},
		{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{}}},
		{Value: &rpcpb.RequestUnion_QueryIntent{QueryIntent: &rpcpb.QueryIntentRequest{}}},
		{Value: &rpcpb.RequestUnion_CommitOnePc{CommitOnePc: &rpcpb.CommitOnePCRequest{}}},
		{Value: &rpcpb.RequestUnion_QueryOnePc{QueryOnePc: &rpcpb.QueryOnePCRequest{}}},
		{Value: &rpcpb.RequestUnion_RecoverIntent{RecoverIntent: &rpcpb.RecoverIntentRequest{}}},
		{Value: &rpcpb.RequestUnion_PlainScan{PlainScan: &rpcpb.PlainScanRequest{}}},
		{Value: &rpcpb.RequestUnion_Prepare{Prepare: &rpcpb.PrepareRequest{}}},
	}
	if len(examples) != int(rpcpb.MethodsMax)-1 {
		t.Fatalf("%d examples for %d methods", len(examples), rpcpb.MethodsMax-1)
	}
	for _, ru := range examples {
		if w := Lookup(ru).EvalWrite != nil; w != ru.IsWrite() {
			t.Errorf("%s: eval says write=%v, rpcpb says %v", ru.Method(), w, ru.IsWrite())
		}
	}
}

// TestEvalDataDriven steps the command table over an in-memory engine:
// see testdata/eval.
func TestEvalDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		eng, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		ctx := Context{Desc: &rpcpb.RangeDescriptor{RangeId: 1, StartKey: []byte("a"), EndKey: []byte("z")}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "range":
				var start, end string
				d.ScanArgs(t, "start", &start)
				d.ScanArgs(t, "end", &end)
				ctx.Desc = &rpcpb.RangeDescriptor{RangeId: 1, StartKey: unquoteKey(t, start), EndKey: unquoteKey(t, end)}
				if d.HasArg("gc") {
					d.ScanArgs(t, "gc", &ctx.GCThreshold)
				}
				return ""
			case "gc-records":
				// Version GC's pass over the key records (GCKeyRecord via
				// mvcc.GCLimitedPlain) below threshold, applied.
				var threshold uint64
				d.ScanArgs(t, "threshold", &threshold)
				b := eng.NewBatch()
				defer b.Close()
				var total KeyRecordGC
				slots, _, err := mvcc.GCLimitedPlain(b, ctx.Desc.StartKey, ctx.Desc.EndKey, threshold, 0, func(k, v []byte) ([]byte, bool) {
					out, changed, st := GCKeyRecord(v, threshold)
					total.Refusals += st.Refusals
					total.OnePC += st.OnePC
					total.Records += st.Records
					return out, changed
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Commit(false); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("records changed %d: refusals dropped %d, 1PC entries dropped %d, records deleted %d\n", slots, total.Refusals, total.OnePC, total.Records)
			case "write", "read":
				req := &rpcpb.BatchRequest{RangeId: 1}
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					req.Requests = append(req.Requests, parseRequest(t, line))
				}
				var out strings.Builder
				for _, s := range Declare(req, ctx.Desc) {
					fmt.Fprintf(&out, "latch %s %s\n", s.Access, s.Span)
				}
				if d.Cmd == "read" {
					snap := eng.NewSnapshot()
					defer snap.Close()
					printResponse(&out, EvalRead(ctx, snap, req))
					return out.String()
				}
				c := ctx
				if d.HasArg("ts") {
					d.ScanArgs(t, "ts", &c.WriteTs)
				}
				b := eng.NewBatch()
				defer b.Close()
				resp, fx := EvalWrite(c, b, req)
				printResponse(&out, resp)
				for _, l := range fx.Locked {
					if l.Strength == concurrency.Shared {
						fmt.Fprintf(&out, "locked %s shared by txn %d\n", l.Key, l.Txn)
						continue
					}
					fmt.Fprintf(&out, "locked %s by txn %d\n", l.Key, l.Txn)
				}
				for _, l := range fx.Unlocked {
					fmt.Fprintf(&out, "unlocked %s of txn %d\n", l.Key, l.Txn)
				}
				if resp.Error == nil {
					// Replay the batch's bytes on the engine, as a follower would.
					a := eng.NewWriteBatch()
					defer a.Close()
					if err := a.ApplyRepr(b.Repr()); err != nil {
						t.Fatal(err)
					}
					if err := a.Commit(false); err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&out, "applied %s\n", map[bool]string{true: "nothing", false: "the batch"}[b.Empty()])
				}
				return out.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func parseRequest(t *testing.T, line string) *rpcpb.RequestUnion {
	f := strings.Fields(line)
	args := map[string]string{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		args[k] = v
	}
	u := func(k string) uint64 {
		if args[k] == "" {
			return 0
		}
		n, err := strconv.ParseUint(args[k], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return n
	}
	b := func(k string) []byte {
		if v, ok := args[k]; ok {
			return unquoteKey(t, v)
		}
		return nil
	}
	_, del := args["delete"]
	switch f[0] {
	case "get":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: b("key"), Ts: u("ts"), TxnStart: u("txn")}}}
	case "scan":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Scan{Scan: &rpcpb.ScanRequest{Start: b("start"), End: b("end"), Ts: u("ts"), TxnStart: u("txn"), Limit: uint32(u("limit"))}}}
	case "refresh":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Refresh{Refresh: &rpcpb.RefreshRequest{Spans: []*rpcpb.Span{{Start: b("start"), End: b("end")}}, FromTs: u("from"), ToTs: u("to"), TxnStart: u("txn")}}}
	case "query-intent":
		_, gone := args["tombstone"]
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_QueryIntent{QueryIntent: &rpcpb.QueryIntentRequest{Key: b("key"), TxnStart: u("txn"), ValueHash: rpcpb.IntentValueHash(b("value"), gone)}}}
	case "recover-intent":
		_, gone := args["tombstone"]
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_RecoverIntent{RecoverIntent: &rpcpb.RecoverIntentRequest{Key: b("key"), TxnStart: u("txn"), ValueHash: rpcpb.IntentValueHash(b("value"), gone)}}}
	case "query-one-pc":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_QueryOnePc{QueryOnePc: &rpcpb.QueryOnePCRequest{Key: b("key"), TxnStart: u("txn")}}}
	case "commit-one-pc":
		// commit-one-pc txn=N write=k:v write=k:<delete> read=k read=a-c
		p := &rpcpb.CommitOnePCRequest{TxnStart: u("txn")}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "write":
				wk, wv, _ := strings.Cut(v, ":")
				w := &rpcpb.OnePCWrite{Key: []byte(wk), Value: []byte(wv)}
				if wv == "<delete>" {
					w.Value, w.Delete = nil, true
				}
				p.Writes = append(p.Writes, w)
			case "read":
				s, e, _ := strings.Cut(v, "-")
				sp := &rpcpb.Span{Start: []byte(s)}
				if e != "" {
					sp.End = []byte(e)
				}
				p.RefreshSpans = append(p.RefreshSpans, sp)
			}
		}
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_CommitOnePc{CommitOnePc: p}}
	case "prepare":
		// prepare txn=N write=k:v write=k:<delete> read=k
		p := &rpcpb.PrepareRequest{Txn: &rpcpb.TxnMeta{StartTs: u("txn")}}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "write":
				wk, wv, _ := strings.Cut(v, ":")
				w := &rpcpb.OnePCWrite{Key: []byte(wk), Value: []byte(wv)}
				if wv == "<delete>" {
					w.Value, w.Delete = nil, true
				}
				p.Writes = append(p.Writes, w)
			case "read":
				p.Reads = append(p.Reads, []byte(v))
			}
		}
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Prepare{Prepare: p}}
	case "plain-scan":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainScan{PlainScan: &rpcpb.PlainScanRequest{Start: b("start"), End: b("end"), Limit: uint32(u("limit"))}}}
	case "plain-get":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: b("key")}}}
	case "put-intent":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{Key: b("key"), Value: b("value"), Delete: del, Txn: &rpcpb.TxnMeta{StartTs: u("txn")}}}}
	case "resolve":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{Key: b("key"), TxnStart: u("txn"), CommitTs: u("commit")}}}
	case "put":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: b("key"), Value: b("value"), Delete: del}}}
	case "plain-put":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: b("key"), Value: b("value"), Delete: del}}}
	case "plain-put-unless-exists":
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{Key: b("key"), Value: b("value")}}}
	}
	t.Fatalf("unknown request %q", line)
	return nil
}

func printResponse(out *strings.Builder, resp *rpcpb.BatchResponse) {
	if e := resp.Error; e != nil {
		fmt.Fprintf(out, "error %s: %s\n", e.Code, e.Message)
		return
	}
	for _, r := range resp.Responses {
		switch v := r.Value.(type) {
		case *rpcpb.ResponseUnion_Get:
			fmt.Fprintf(out, "get: found=%v value=%q ts=%d\n", v.Get.Found, v.Get.Value, v.Get.Ts)
		case *rpcpb.ResponseUnion_Scan:
			fmt.Fprintf(out, "scan:")
			for _, kv := range v.Scan.Kvs {
				fmt.Fprintf(out, " %s=%s@%d", kv.Key, kv.Value, kv.Ts)
			}
			fmt.Fprintf(out, " resume=%q\n", v.Scan.ResumeKey)
		case *rpcpb.ResponseUnion_PlainScan:
			fmt.Fprintf(out, "plain-scan:")
			for _, kv := range v.PlainScan.Kvs {
				fmt.Fprintf(out, " %s=%s", kv.Key, kv.Value)
			}
			fmt.Fprintf(out, " resume=%q\n", v.PlainScan.ResumeKey)
		case *rpcpb.ResponseUnion_QueryIntent:
			fmt.Fprintf(out, "query-intent: found=%v\n", v.QueryIntent.Found)
		case *rpcpb.ResponseUnion_RecoverIntent:
			fmt.Fprintf(out, "recover-intent: found=%v\n", v.RecoverIntent.Found)
		case *rpcpb.ResponseUnion_CommitOnePc:
			fmt.Fprintf(out, "commit-one-pc: commit_ts=%d\n", v.CommitOnePc.CommitTs)
		case *rpcpb.ResponseUnion_QueryOnePc:
			fmt.Fprintf(out, "query-one-pc: committed=%v commit_ts=%d prevented=%v\n", v.QueryOnePc.Committed, v.QueryOnePc.CommitTs, v.QueryOnePc.Prevented)
		case *rpcpb.ResponseUnion_PlainGet:
			fmt.Fprintf(out, "plain-get: found=%v value=%q\n", v.PlainGet.Found, v.PlainGet.Value)
		case *rpcpb.ResponseUnion_PlainPutUnlessExists:
			fmt.Fprintf(out, "plain-put-unless-exists: succeeded=%v existing=%q\n", v.PlainPutUnlessExists.Succeeded, v.PlainPutUnlessExists.Existing)
		case *rpcpb.ResponseUnion_Put:
			fmt.Fprintf(out, "put: ts=%d\n", v.Put.Ts)
		default:
			fmt.Fprintf(out, "%s: ok\n", strings.TrimPrefix(fmt.Sprintf("%T", v), "*rpcpb.ResponseUnion_"))
		}
	}
}

// unquoteKey reads a key or value argument: as written, or Go-quoted
// ("\x00s\x01") for bytes a test file cannot spell.
func unquoteKey(t *testing.T, s string) []byte {
	if !strings.HasPrefix(s, `"`) {
		return []byte(s)
	}
	u, err := strconv.Unquote(s)
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return []byte(u)
}
