package kvserver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

type rawClient struct {
	t     *testing.T
	conns map[string]rpcpb.KVClient
	addrs []string
}

func newRaw(t *testing.T, addrs []string) *rawClient {
	rc := &rawClient{t: t, conns: map[string]rpcpb.KVClient{}, addrs: addrs}
	for _, a := range addrs {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rc.conns[a] = rpcpb.NewKVClient(c)
	}
	return rc
}

// send routes one batch for key to its leaseholder, following hints.
func (rc *rawClient) send(key []byte, reqs ...*rpcpb.RequestUnion) *rpcpb.BatchResponse {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := rc.addrs[0]
	for attempt := 0; attempt < 200; attempt++ {
		lk, err := rc.conns[addr].RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: key})
		if err != nil || lk.Error != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		target := addr
		for _, n := range lk.Nodes {
			if n.NodeId == lk.LeaseholderNodeId {
				target = n.Address
			}
		}
		resp, err := rc.conns[target].Batch(ctx, &rpcpb.BatchRequest{RangeId: lk.Range.RangeId, Requests: reqs})
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if e := resp.Error; e != nil {
			switch e.Code {
			case rpcpb.ErrorCode_NOT_LEASEHOLDER, rpcpb.ErrorCode_RANGE_KEY_MISMATCH, rpcpb.ErrorCode_RANGE_NOT_FOUND, rpcpb.ErrorCode_UNAVAILABLE:
				if e.LeaseholderAddress != "" {
					addr = e.LeaseholderAddress
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		return resp
	}
	rc.t.Fatalf("no answer for key %q", key)
	return nil
}

func put(k, v string) *rpcpb.RequestUnion {
	return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: keys.UserKey([]byte(k)), Value: []byte(v)}}}
}

func get(k string) *rpcpb.RequestUnion {
	return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: keys.UserKey([]byte(k))}}}
}

func TestClusterPutGetSplit(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRaw(t, c.Addrs())
	for _, k := range []string{"a", "m", "z"} {
		resp := rc.send(keys.UserKey([]byte(k)), put(k, "v-"+k))
		if resp.Error != nil {
			t.Fatalf("put %s: %v", k, resp.Error)
		}
	}
	resp := rc.send(keys.UserKey([]byte("m")), get("m"))
	if resp.Error != nil || string(resp.Responses[0].GetGet().Value) != "v-m" {
		t.Fatalf("get m: %v", resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sr, err := rc.conns[c.Addrs()[1]].Split(ctx, &rpcpb.SplitRequest{SplitKey: keys.UserKey([]byte("m"))})
	if err != nil || sr.Error != nil {
		t.Fatalf("split: %v %v", err, sr.GetError())
	}
	for _, k := range []string{"a", "m", "z"} {
		resp := rc.send(keys.UserKey([]byte(k)), get(k))
		if resp.Error != nil || string(resp.Responses[0].GetGet().Value) != "v-"+k {
			t.Fatalf("get %s after split: %v", k, resp)
		}
	}
	lk, err := rc.conns[c.Addrs()[2]].RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: keys.UserKey([]byte("z"))})
	if err != nil || lk.Error != nil || string(lk.Range.StartKey) != string(keys.UserKey([]byte("m"))) {
		t.Fatalf("lookup after split: %v %v", err, lk)
	}

	// The store of a stopped node shows both halves of the split range
	// and the three versions written.
	c.StopNode(2)
	eng, err := storage.Open(filepath.Join(c.Dir(), "n3"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	info, err := kvserver.InspectStore(eng)
	if err != nil {
		t.Fatal(err)
	}
	versions, userRanges := 0, 0
	for _, r := range info.Ranges {
		if r.Desc != nil && keys.IsUser(r.Desc.StartKey) {
			userRanges++
			versions += r.Versions
		}
	}
	if info.NodeID != 3 || userRanges != 2 || versions != 3 {
		t.Fatalf("store of n3: node %d, %d user ranges, %d versions; want n3, 2, 3", info.NodeID, userRanges, versions)
	}
}

// TestOracleServesByLease (issue 7, item 5): a write's timestamp, and a
// range lookup, cost no ReadIndex round on range 1 while its leader holds
// a valid lease; ReadIndex is only the fallback. The bound (fewer rounds than
// half the puts) leaves room for a lease that lapses on a loaded machine.
func TestOracleServesByLease(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRaw(t, c.Addrs())
	oracleRounds := func() uint64 {
		var sum uint64
		for i := range c.Addrs() {
			_, o := c.Node(i).ReadIndexRounds()
			sum += o
		}
		return sum
	}
	if resp := rc.send(keys.UserKey([]byte("warm")), put("warm", "v")); resp.Error != nil {
		t.Fatalf("put: %v", resp.Error)
	}
	// The key's range and leaseholder, looked up again only when a put
	// is refused (the lease may move to its preferred node just after
	// start): a lookup read range 1's meta records with a round of its own
	// before, and the lookups are counted separately below.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rangeID uint64
	target := ""
	lookup := func() {
		for attempt := 0; attempt < 100; attempt++ {
			lk, err := rc.conns[c.Addrs()[attempt%len(c.Addrs())]].RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: keys.UserKey([]byte("warm"))})
			if err == nil && lk.Error == nil {
				for _, n := range lk.Nodes {
					if n.NodeId == lk.LeaseholderNodeId {
						rangeID, target = lk.Range.RangeId, n.Address
						return
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no lookup named the leaseholder")
	}
	lookup()
	const puts = 40
	before := oracleRounds()
	for i := 0; i < puts; {
		resp, err := rc.conns[target].Batch(ctx, &rpcpb.BatchRequest{RangeId: rangeID, Requests: []*rpcpb.RequestUnion{put("warm", fmt.Sprint(i))}})
		if err == nil && resp.Error == nil {
			i++
			continue
		}
		if e := resp.GetError(); err != nil || e.Code == rpcpb.ErrorCode_NOT_LEASEHOLDER || e.Code == rpcpb.ErrorCode_UNAVAILABLE {
			time.Sleep(20 * time.Millisecond)
			lookup()
			continue
		}
		t.Fatalf("put %d: %v", i, resp.GetError())
	}
	n := oracleRounds() - before
	t.Logf("%d puts, %d ReadIndex rounds on range 1", puts, n)
	if n >= puts/2 {
		t.Fatalf("%d puts cost %d ReadIndex rounds on range 1: the oracle did not serve by its lease", puts, n)
	}
	// Range lookups read range 1's meta records by the lease too.
	before = oracleRounds()
	for i := range puts {
		for _, a := range c.Addrs() {
			k := keys.UserKey([]byte(fmt.Sprint("lookup", i)))
			for attempt := 0; ; attempt++ {
				lk, err := rc.conns[a].RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: k})
				if err == nil && lk.Error == nil {
					break
				}
				if attempt == 100 {
					t.Fatalf("lookup at %s: %v %v", a, err, lk.GetError())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	n = oracleRounds() - before
	t.Logf("%d lookups, %d ReadIndex rounds on range 1", 3*puts, n)
	if n >= 3*puts/2 {
		t.Fatalf("%d range lookups cost %d ReadIndex rounds on range 1: meta was not read by the lease", 3*puts, n)
	}
}

// TestDelayedLinks: with a one-way delay injected on every link, Raft
// still elects leaders and commits; writes and reads succeed.
func TestDelayedLinks(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		for j := 1; j <= 3; j++ {
			c.Node(i).SetLinkFault(uint64(j), kvserver.LinkFault{Delay: 30 * time.Millisecond})
		}
	}
	rc := newRaw(t, c.Addrs())
	for i := 0; i < 20; i++ {
		k := string(rune('a' + i))
		if resp := rc.send(keys.UserKey([]byte(k)), put(k, "v")); resp.Error != nil {
			t.Fatalf("put %s: %v", k, resp.Error)
		}
		if resp := rc.send(keys.UserKey([]byte(k)), get(k)); resp.Error != nil || string(resp.Responses[0].GetGet().Value) != "v" {
			t.Fatalf("get %s: %v", k, resp)
		}
	}
}

// TestBatchLimits: a node refuses oversized batches with INVALID_ARGUMENT
// naming the limit.
func TestBatchLimits(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRaw(t, c.Addrs())
	var reqs []*rpcpb.RequestUnion
	for i := 0; i <= keys.TxnKeysMax; i++ {
		reqs = append(reqs, get("k"))
	}
	resp := rc.send(keys.UserKey([]byte("k")), reqs...)
	if resp.Error.GetCode() != rpcpb.ErrorCode_INVALID_ARGUMENT || !strings.Contains(resp.Error.GetMessage(), "TxnKeysMax") {
		t.Fatalf("oversized batch: got %v", resp.Error)
	}
}

// TestProxyToLeaseholder (issue 13, item 7, case b): a batch sent to a
// replica that is not the leaseholder gets NOT_LEASEHOLDER; with the
// proxy header, that replica forwards it to the leaseholder and returns
// its answer, for a write and for a read.
func TestProxyToLeaseholder(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRaw(t, c.Addrs())
	if resp := rc.send(keys.UserKey([]byte("p")), put("p", "v1")); resp.Error != nil {
		t.Fatalf("put: %v", resp.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := rc.conns[c.Addrs()[0]].RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: keys.UserKey([]byte("p"))})
	if err != nil || lk.Error != nil {
		t.Fatalf("lookup: %v %v", err, lk)
	}
	var other string // a replica that is not the leaseholder
	for _, n := range lk.Nodes {
		if n.NodeId != lk.LeaseholderNodeId {
			other = n.Address
		}
	}
	pctx := metadata.AppendToOutgoingContext(ctx, kvserver.ProxyHeader, "1")
	for _, tc := range []struct {
		name string
		req  *rpcpb.RequestUnion
	}{{"write", put("p", "v2")}, {"read", get("p")}} {
		br := &rpcpb.BatchRequest{RangeId: lk.Range.RangeId, Requests: []*rpcpb.RequestUnion{tc.req}}
		resp, err := rc.conns[other].Batch(ctx, br)
		if err != nil || resp.Error.GetCode() != rpcpb.ErrorCode_NOT_LEASEHOLDER {
			t.Fatalf("%s without the header: %v %v, want NOT_LEASEHOLDER", tc.name, err, resp.GetError())
		}
		resp, err = rc.conns[other].Batch(pctx, br)
		if err != nil || resp.Error != nil {
			t.Fatalf("%s with the header: %v %v", tc.name, err, resp.GetError())
		}
		if tc.name == "read" && string(resp.Responses[0].GetGet().Value) != "v2" {
			t.Fatalf("read through the proxy: %v", resp)
		}
	}
	// The oracle's Timestamps: a node that is not the oracle host answers
	// NOT_LEASEHOLDER naming it, and with the header fetches the
	// timestamps for the client (a client cut off from the oracle host).
	var host uint64
	for host == 0 {
		for i, addr := range c.Addrs() {
			resp, err := rc.conns[addr].Timestamps(ctx, &rpcpb.TimestampRequest{Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Error == nil {
				host = uint64(i + 1)
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no oracle host answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, addr := range c.Addrs() {
		if uint64(i+1) == host {
			continue
		}
		resp, err := rc.conns[addr].Timestamps(ctx, &rpcpb.TimestampRequest{Count: 3})
		if err != nil || resp.Error.GetCode() != rpcpb.ErrorCode_NOT_LEASEHOLDER || resp.Error.GetLeaseholderHint() != host {
			t.Fatalf("timestamps at n%d without the header: %v %v, want NOT_LEASEHOLDER naming n%d", i+1, err, resp.GetError(), host)
		}
		resp, err = rc.conns[addr].Timestamps(pctx, &rpcpb.TimestampRequest{Count: 3})
		if err != nil || resp.Error != nil || resp.Count != 3 || resp.First == 0 {
			t.Fatalf("timestamps at n%d with the header: %v %v", i+1, err, resp)
		}
	}
}
