package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/tso"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"github.com/cockroachdb/datadriven"
)

// TestLayerSteps runs the step-by-step tests of the coordinator's layers
// (txn_layers.go): each file of testdata/layers builds one layer over a
// scripted fake of the layer below (scriptedLower) and drives it with
// operations, printing every request the layer sends down and every
// answer it gives. Commands:
//
//	new <layer> [args]   the layer under test: heartbeater [age=<dur>],
//	                     sequencer, pipeliner [pipelining=off]
//	                     [budget=<bytes>] [parallel], committer,
//	                     refresher [iso=snapshot] [max=<n>] [fence=off],
//	                     recovery commit=<ts> writes=k,k, twopc
//	script               each input line queues one reply of the fake
//	                     lower layer: <op> [key=<k>] [err=<kind>]
//	                     [value=<v>] [kvs=k:v,...] [ts=<n>] [lost]
//	                     [found] [prevented] [fenced]
//	                     [d=aborted|committed:<n>]
//	                     [missing=k,...] [hold=<name>] [name=<n>]
//	                     [after=<n>]; a reply answers
//	                     the first later request of that op (and key);
//	                     unscripted requests get defaults (success, found
//	                     nothing, timestamps 110, 111, ...)
//	get k=, scan start= end= [limit=], put k= v= [seq=], delete k=
//	[seq=], commit [inflight=k,k], abort, refresh ts=, recover,
//	commit-1pc w=k:v,k:<delete>,...
//	                     send one request to the layer and wait
//	go <request>         send it on another goroutine; return once it
//	                     finished or waits on a held reply
//	release <name>       answer the held reply; return once every request
//	                     finished or waits on a held reply
//	state                the layer's state
//	tick, stop           (heartbeater) one refresh tick; stop the heartbeat
//
// Only one goroutine runs at a time (the others wait on held replies), so
// the output is deterministic.
func TestLayerSteps(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "layers"), func(t *testing.T, path string) {
		h := &stepHarness{t: t}
		defer h.close()
		datadriven.RunTest(t, path, h.run)
	})
}

// stepLog collects what the fakes saw, in order.
type stepLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *stepLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// take returns the lines added since the last take. The committer sends
// its STAGING put and its proofs at once, from two goroutines, so their
// two lines may come in either order; they are printed put-staging first.
func (l *stepLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	for i := 0; i+1 < len(out); i++ {
		if strings.HasPrefix(out[i], "-> prove") && strings.HasPrefix(out[i+1], "-> put-staging") {
			out[i], out[i+1] = out[i+1], out[i]
		}
	}
	return out
}

// scriptedReply is one scripted answer of the fake lower layer.
type scriptedReply struct {
	op   txnOp
	key  string // "" answers a request on any key
	resp *txnResp
	err  error
	// missing: prove, the keys whose writes are not in place.
	missing map[string]bool
	// hold, if not nil: the answer waits until it is closed.
	hold     chan struct{}
	holdName string
	// name (unique in a file): other replies may wait for this one
	// (after); after: the
	// answer waits until the reply with that name was answered. Unlike
	// hold, the command needs no release: the order of the answers of one
	// command's concurrent requests is fixed, and its output too.
	name, after string
}

// scriptedLower is the fake lower layer of the step tests: it logs every
// request and answers from the script, else with a default.
type scriptedLower struct {
	log *stepLog
	// held receives one value each time a request starts waiting on a
	// held reply.
	held chan string

	mu struct {
		sync.Mutex
		replies []*scriptedReply
		nextTs  uint64
		// done: per reply name, closed once that reply was answered.
		done map[string]chan struct{}
	}
}

// answered returns the channel closed once the reply named name is
// answered.
func (l *scriptedLower) answered(name string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.done == nil {
		l.mu.done = map[string]chan struct{}{}
	}
	c, ok := l.mu.done[name]
	if !ok {
		c = make(chan struct{})
		l.mu.done[name] = c
	}
	return c
}

func newScriptedLower(log *stepLog) *scriptedLower {
	l := &scriptedLower{log: log, held: make(chan string, 100)}
	l.mu.nextTs = 110
	return l
}

func (l *scriptedLower) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	l.log.add("-> %s", r)
	l.mu.Lock()
	var rep *scriptedReply
	for i, c := range l.mu.replies {
		if c.op == r.op && (c.key == "" || c.key == string(r.key) || ((r.op == opProve || r.op == opRecoverIntents) && proofsHave(r.proofs, c.key))) {
			rep = c
			l.mu.replies = append(l.mu.replies[:i], l.mu.replies[i+1:]...)
			break
		}
	}
	if rep == nil {
		rep = &scriptedReply{resp: l.defaultRespLocked(r)}
	}
	if rep.resp == nil && rep.err == nil {
		rep.resp = l.defaultRespLocked(r)
	}
	l.mu.Unlock()
	if rep.hold != nil {
		l.held <- rep.holdName
		select {
		case <-rep.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if rep.after != "" {
		select {
		case <-l.answered(rep.after):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if rep.name != "" {
		defer close(l.answered(rep.name))
	}
	if rep.err != nil {
		return nil, rep.err
	}
	resp := *rep.resp
	if r.op == opProve || r.op == opRecoverIntents {
		resp.proven = make([]bool, len(r.proofs))
		for i, p := range r.proofs {
			resp.proven[i] = !rep.missing[string(p.key)]
		}
	}
	return &resp, nil
}

func proofsHave(ps []inFlightWrite, key string) bool {
	for _, p := range ps {
		if string(p.key) == key {
			return true
		}
	}
	return false
}

func (l *scriptedLower) defaultRespLocked(r *txnReq) *txnResp {
	switch r.op {
	case opTimestamp, opCommit, opOnePC:
		ts := l.mu.nextTs
		l.mu.nextTs++
		return &txnResp{ts: ts}
	case opPutStatus, opPutStaging:
		return &txnResp{won: true}
	}
	return &txnResp{}
}

// parseReply parses one line of a script command.
func parseReply(t *testing.T, line string) *scriptedReply {
	t.Helper()
	fields := strings.Fields(line)
	op := txnOp(0)
	for i, n := range opNames {
		if n == fields[0] {
			op = txnOp(i)
		}
	}
	if op == 0 {
		t.Fatalf("script: unknown op %q", fields[0])
	}
	rep := &scriptedReply{op: op}
	resp := &txnResp{}
	set := false
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "key":
			rep.key = v
		case "err":
			rep.err = scriptedError(t, v)
		case "value":
			resp.value, resp.found, set = []byte(v), true, true
		case "kvs":
			for _, kv := range strings.Split(v, ",") {
				kk, vv, _ := strings.Cut(kv, ":")
				resp.kvs = append(resp.kvs, &rpcpb.KeyValue{Key: []byte(kk), Value: []byte(vv)})
			}
			set = true
		case "ts":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			resp.ts, set = n, true
		case "lost":
			// put-status: another value was there.
			resp.won, set = false, true
		case "found":
			resp.found, set = true, true
		case "prevented":
			resp.prevented, set = true, true
		case "fenced":
			resp.won, resp.fenced, set = false, true, true
		case "d":
			resp.d, set = parseDecision(t, v), true
		case "missing":
			rep.missing = map[string]bool{}
			for _, m := range strings.Split(v, ",") {
				rep.missing[m] = true
			}
		case "hold":
			rep.hold, rep.holdName = make(chan struct{}), v
		case "name":
			rep.name = v
		case "after":
			rep.after = v
		default:
			t.Fatalf("script: unknown argument %q", f)
		}
	}
	if set {
		rep.resp = resp
	}
	return rep
}

func parseDecision(t *testing.T, v string) decision {
	t.Helper()
	if v == "aborted" {
		return decision{commitTs: txnstatus.Aborted}
	}
	n, ok := strings.CutPrefix(v, "committed:")
	if !ok {
		t.Fatalf("decision %q: want aborted or committed:<ts>", v)
	}
	ts, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return decision{commitTs: ts}
}

func scriptedError(t *testing.T, kind string) error {
	t.Helper()
	switch kind {
	case "ambiguous":
		return fmt.Errorf("%w: scripted", ErrAmbiguous)
	case "unavailable":
		return fmt.Errorf("%w: scripted", ErrUnavailable)
	case "write-too-old":
		return &RetryableError{Reason: ReasonWriteTooOld, Ts: 150, Msg: "scripted"}
	case "read-conflict":
		return &RetryableError{Reason: ReasonReadConflict, Ts: 150, Msg: "scripted"}
	case "bad-status":
		return fmt.Errorf("%w: %w: scripted", ErrInternal, errBadStatus)
	case "ineligible":
		return errOnePCIneligible
	}
	t.Fatalf("unknown error kind %q", kind)
	return nil
}

// stepHarness runs one datadriven file of layer steps.
type stepHarness struct {
	t     *testing.T
	log   stepLog
	lower *scriptedLower
	layer txnLayer
	state func() string
	// results receives the output line of each request run with go.
	results chan string
	active  int
	holds   map[string]chan struct{}
	// Heartbeater only.
	hb       *txnHeartbeater
	ticks    chan time.Time
	recorded chan struct{}
	cancel   context.CancelFunc
}

func (h *stepHarness) close() {
	for _, c := range h.holds {
		select {
		case <-c:
		default:
			close(c)
		}
	}
	if h.hb != nil {
		h.hb.stop()
	}
	if h.cancel != nil {
		h.cancel()
	}
}

func (h *stepHarness) run(t *testing.T, d *datadriven.TestData) string {
	var out []string
	switch d.Cmd {
	case "new":
		h.build(t, d)
	case "script":
		for _, line := range strings.Split(d.Input, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			rep := parseReply(t, line)
			if rep.hold != nil {
				h.holds[rep.holdName] = rep.hold
			}
			h.lower.mu.Lock()
			h.lower.mu.replies = append(h.lower.mu.replies, rep)
			h.lower.mu.Unlock()
		}
	case "go":
		r := h.request(t, d.CmdArgs)
		h.active++
		go func() { h.results <- r.String() + ": " + h.do(r) }()
		out = h.settle(t)
	case "release":
		c := h.holds[d.CmdArgs[0].Key]
		if c == nil {
			t.Fatalf("no hold %q", d.CmdArgs[0].Key)
		}
		close(c)
		delete(h.holds, d.CmdArgs[0].Key)
		h.active++
		out = h.settle(t)
	case "state":
		out = append(h.log.take(), h.state())
	case "tick":
		h.ticks <- fakeNow
		select {
		case <-h.recorded:
		case <-time.After(10 * time.Second):
			t.Fatal("tick: no record written")
		}
		out = h.log.take()
	case "stop":
		written, _ := h.hb.stop()
		out = append(h.log.take(), fmt.Sprintf("stopped: record written=%v", written))
	default:
		r := h.request(t, append([]datadriven.CmdArg{{Key: d.Cmd}}, d.CmdArgs...))
		res := h.do(r)
		out = append(h.log.take(), res)
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}

// settle waits until every request run with go has finished or waits on
// a held reply, and returns the log and the results of those finished.
// active counts the goroutines that are neither finished nor held.
func (h *stepHarness) settle(t *testing.T) []string {
	var done []string
	for h.active > 0 {
		select {
		case <-h.lower.held:
		case res := <-h.results:
			done = append(done, res)
		case <-time.After(10 * time.Second):
			t.Fatal("a request neither finished nor waits on a held reply")
		}
		h.active--
	}
	return append(h.log.take(), done...)
}

func (h *stepHarness) request(t *testing.T, args []datadriven.CmdArg) *txnReq {
	arg := func(k string) string {
		for _, a := range args {
			if a.Key == k && len(a.Vals) > 0 {
				return a.Vals[0]
			}
		}
		return ""
	}
	num := func(k string) int {
		if arg(k) == "" {
			return 0
		}
		n, err := strconv.Atoi(arg(k))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	switch args[0].Key {
	case "get":
		return &txnReq{op: opGet, key: []byte(arg("k"))}
	case "scan":
		return &txnReq{op: opScan, key: []byte(arg("start")), end: []byte(arg("end")), limit: num("limit")}
	case "put":
		return &txnReq{op: opWrite, key: []byte(arg("k")), value: []byte(arg("v")), seq: uint64(num("seq"))}
	case "delete":
		return &txnReq{op: opWrite, key: []byte(arg("k")), del: true, seq: uint64(num("seq"))}
	case "commit":
		// inflight=k,k: the writes the pipeliner hands down with parallel
		// commits on (value hash = seq = position).
		r := &txnReq{op: opCommit}
		if arg("inflight") != "" {
			for i, k := range strings.Split(arg("inflight"), ",") {
				r.proofs = append(r.proofs, inFlightWrite{key: []byte(k), hash: uint64(i + 1), seq: uint64(i + 1)})
			}
		}
		return r
	case "recover":
		return &txnReq{op: opRecover}
	case "abort":
		return &txnReq{op: opAbort}
	case "refresh":
		return &txnReq{op: opRefresh, ts: uint64(num("ts"))}
	case "commit-1pc":
		r := &txnReq{op: opCommitOnePC}
		for _, kv := range strings.Split(arg("w"), ",") {
			k, v, _ := strings.Cut(kv, ":")
			if v == "<delete>" {
				r.writes = append(r.writes, Write{Key: []byte(k), Delete: true})
			} else {
				r.writes = append(r.writes, Write{Key: []byte(k), Value: []byte(v)})
			}
		}
		return r
	}
	t.Fatalf("unknown request %q", args[0].Key)
	return nil
}

// do sends r to the layer and describes the outcome.
func (h *stepHarness) do(r *txnReq) string {
	resp, err := h.layer.send(context.Background(), r)
	if err != nil {
		return "error: " + err.Error()
	}
	switch r.op {
	case opGet:
		if !resp.found {
			return "not found"
		}
		return "value " + string(resp.value)
	case opScan:
		var kvs []string
		for _, kv := range resp.kvs {
			kvs = append(kvs, fmt.Sprintf("%s=%s", kv.Key, kv.Value))
		}
		return "kvs [" + strings.Join(kvs, " ") + "]"
	case opCommit, opCommitOnePC:
		if resp.implicit {
			return fmt.Sprintf("committed at %d (implicitly: STAGING and every proof)", resp.ts)
		}
		return fmt.Sprintf("committed at %d", resp.ts)
	case opAbort:
		if resp.d.aborted() {
			return "aborted"
		}
		return fmt.Sprintf("committed at %d (the abort lost)", resp.d.commitTs)
	case opRecover:
		if resp.d.aborted() {
			return "recovered: aborted"
		}
		return fmt.Sprintf("recovered: committed at %d", resp.d.commitTs)
	}
	return "ok"
}

func (h *stepHarness) build(t *testing.T, d *datadriven.TestData) {
	h.log.take()
	h.lower = newScriptedLower(&h.log)
	h.results = make(chan string, 100)
	h.holds = map[string]chan struct{}{}
	h.state = func() string { return "(no state)" }
	lower := h.lower
	switch d.CmdArgs[0].Key {
	case "heartbeater":
		age := time.Duration(0)
		if d.HasArg("age") {
			var s string
			d.ScanArgs(t, "age", &s)
			var err error
			if age, err = time.ParseDuration(s); err != nil {
				t.Fatal(err)
			}
		}
		bg, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.ticks = make(chan time.Time)
		h.recorded = make(chan struct{}, 100)
		startTs := uint64(fakeNow.Add(-age).UnixMilli()) << tso.DefaultLogicalBits
		h.hb = newHeartbeater(lower, heartbeatConfig{
			startTs: startTs, ttl: 5 * time.Second, lifetimeMax: time.Hour,
			clock: func() time.Time { return fakeNow }, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), bg: bg,
			putRecord: func(ctx context.Context, expiry time.Time) error {
				h.log.add("record: expires at now+%v", expiry.Sub(fakeNow))
				h.recorded <- struct{}{}
				return nil
			},
			ticks: h.ticks,
		})
		h.layer = h.hb
		h.state = func() string {
			h.hb.mu.Lock()
			defer h.hb.mu.Unlock()
			return fmt.Sprintf("running=%v stopped=%v record written=%v", h.hb.mu.running, h.hb.mu.stopped, h.hb.mu.written)
		}
	case "committer":
		var st stats
		h.layer = &txnCommitter{next: lower, startTs: 100, abortTimeout: time.Second,
			logger: slog.New(slog.NewTextHandler(io.Discard, nil)), stats: &st}
		h.state = func() string {
			return fmt.Sprintf("ambiguous commits resolved by lookup: %d; parallel commits: %d", st.ambiguousResolved.load(), st.parallelCommits.load())
		}
	case "refresher":
		iso := "serializable"
		if d.HasArg("iso") {
			d.ScanArgs(t, "iso", &iso)
		}
		max := 100
		if d.HasArg("max") {
			d.ScanArgs(t, "max", &max)
		}
		fence := "on"
		if d.HasArg("fence") {
			d.ScanArgs(t, "fence", &fence)
		}
		f := newSpanRefresher(lower, iso == "serializable", fence == "on", max)
		h.layer = f
		h.state = func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			var s []string
			for _, sp := range f.mu.reads {
				if len(sp.GetEnd()) == 0 {
					s = append(s, printable(sp.GetStart()))
				} else {
					s = append(s, fmt.Sprintf("[%s, %s)", printable(sp.GetStart()), printable(sp.GetEnd())))
				}
			}
			return "reads: [" + strings.Join(s, " ") + "]"
		}
	case "sequencer":
		h.layer = &txnSeqNumAllocator{next: lower}
	case "recovery":
		// recover: recoverStaging of the STAGING record commit=<ts>
		// writes=k,k (value hash = position).
		var commitTs uint64
		var ws string
		d.ScanArgs(t, "commit", &commitTs)
		d.ScanArgs(t, "writes", &ws)
		st := txnstatus.Staging{CommitTs: commitTs}
		for i, k := range strings.Split(ws, ",") {
			st.Writes = append(st.Writes, txnstatus.StagedWrite{Key: []byte(k), ValueHash: uint64(i + 1)})
		}
		h.layer = recoveryUnderTest{lower: lower, st: st}
	case "pipeliner":
		on := "on"
		if d.HasArg("pipelining") {
			d.ScanArgs(t, "pipelining", &on)
		}
		budget := 256 << 10
		if d.HasArg("budget") {
			d.ScanArgs(t, "budget", &budget)
		}
		var st stats
		p := newPipeliner(lower, on == "on", int64(budget), &st)
		p.parallelCommits = d.HasArg("parallel")
		h.layer = p
		h.state = func() string {
			p.mu.Lock()
			defer p.mu.Unlock()
			var ws []string
			for _, w := range p.inFlightSpanLocked(nil, nil) {
				ws = append(ws, fmt.Sprintf("%s (%d bytes)", w, w.bytes))
			}
			return fmt.Sprintf("in flight: [%s], budget used %d of %d; stats: %d pipelined, %d stalls, %d failed",
				strings.Join(ws, " "), p.mu.bytes, p.bytesMax, st.pipelinedWrites.load(), st.pipelineStalls.load(), st.pipelinedWritesFailed.load())
		}
	case "twopc":
		// The Txn's side, faked: the lock set (the write set lives in
		// Txn, above the layer, so the fake's cleanup keys are the lock
		// set alone).
		var locks []string
		resolved := false
		c := newTwoPCCoordinator(lower, 100, twoPCTxn{
			addLock: func(k []byte) error {
				h.log.add("lock set + %s", k)
				locks = append(locks, string(k))
				return nil
			},
			cleanupKeys: func() [][]byte {
				var ks [][]byte
				for _, k := range locks {
					ks = append(ks, []byte(k))
				}
				return ks
			},
			resolved: func() { resolved = true },
		})
		h.layer = c
		h.state = func() string {
			c.mu.Lock()
			defer c.mu.Unlock()
			var reads []string
			for _, k := range c.mu.reads {
				reads = append(reads, string(k))
			}
			return fmt.Sprintf("buffered writes %v; locked reads %v; prepared=%v; second phase done=%v", c.mu.order, reads, c.mu.prepared, resolved)
		}
	default:
		t.Fatalf("unknown layer %q", d.CmdArgs[0].Key)
	}
}

// recoveryUnderTest runs recoverStaging of st on opRecover.
type recoveryUnderTest struct {
	lower txnLayer
	st    txnstatus.Staging
}

func (r recoveryUnderTest) send(ctx context.Context, q *txnReq) (*txnResp, error) {
	if q.op != opRecover {
		return nil, fmt.Errorf("recovery step test: send recover, not %v", q.op)
	}
	d, err := recoverStaging(ctx, r.lower, r.st)
	if err != nil {
		return nil, err
	}
	return &txnResp{d: d}, nil
}
