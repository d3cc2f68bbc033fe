package testcluster_test

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestPartitionedLeaseholderServesNoStaleRead checks the leader lease
// (replica.leaderLease): a leaseholder cut off from its peers may keep
// serving reads from memory only until its lease ends, and a new leader is
// elected only after that. So once the others have acknowledged a newer
// write, a read sent to the old leaseholder returns an error (or the new
// value), never the old value.
func TestPartitionedLeaseholderServesNoStaleRead(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	key := []byte("lease/k")
	if err := db.Put(ctx, key, []byte("old")); err != nil {
		t.Fatal(err)
	}
	rangeID, old, err := busiestRange(ctx, db, c, [][]byte{keys.UserKey(key)})
	if err != nil {
		t.Fatal(err)
	}
	// A read at the leaseholder through its lease, before the partition.
	conn, err := grpc.NewClient(c.Addrs()[old], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := rpcpb.NewKVClient(conn)
	get := func() (*rpcpb.BatchResponse, error) {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		return kv.Batch(rctx, &rpcpb.BatchRequest{RangeId: rangeID, Requests: []*rpcpb.RequestUnion{
			{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: keys.UserKey(key), Ts: math.MaxUint64 - 1}}}}})
	}
	if resp, err := get(); err != nil || resp.Error != nil || !bytes.Equal(resp.Responses[0].GetGet().GetValue(), []byte("old")) {
		t.Fatalf("read at the leaseholder n%d before the partition: %v %v", old+1, resp, err)
	}

	// From the partition on, read at the old leaseholder without pause,
	// noting when each read started and what it returned.
	type read struct {
		start time.Time
		value []byte
	}
	reads := make(chan read, 1<<16)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			resp, err := get()
			if err == nil && resp.Error == nil {
				select {
				case reads <- read{start, resp.Responses[0].GetGet().GetValue()}:
				default:
				}
			}
		}
	}()
	setLinks(c, old, kvserver.LinkFault{Drop: true})
	t.Logf("partitioned n%d, leaseholder of r%d", old+1, rangeID)
	others := []string{}
	for j, a := range c.Addrs() {
		if j != old {
			others = append(others, a)
		}
	}
	db2 := openDBAt(t, others)
	for {
		err := db2.Put(ctx, key, []byte("new"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("writing through the majority: %v", err)
		}
		t.Logf("put through the majority: %v (retrying)", err)
	}
	acked := time.Now()
	t.Logf("the majority acknowledged the new value")
	time.Sleep(time.Second) // keep reading a while; no assertion depends on it
	close(stop)
	<-done
	close(reads)
	served := 0
	for r := range reads {
		served++
		if r.start.After(acked) && !bytes.Equal(r.value, []byte("new")) {
			t.Fatalf("a read at the partitioned former leaseholder n%d, started after the majority acknowledged %q, returned %q: a stale read", old+1, "new", r.value)
		}
	}
	t.Logf("n%d served %d reads after the partition, none stale", old+1, served)
}

// openDBAt opens a client on the given addresses and closes it when t ends.
func openDBAt(t *testing.T, addrs []string) *client.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	db, err := client.Open(ctx, addrs, client.WithOptions(client.Options{RPCTimeout: workloadRPCTimeout}))
	if err != nil {
		t.Fatalf("opening client on %v: %v", addrs, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
