package kvserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// TestStatusScheduleWritesValidated: on a real cluster, the client's
// change of status encoding (SetStatusEncoding) passes the node's checks
// of the schedule version it writes, and the node refuses, with
// INVALID_ARGUMENT naming the problem, a plain write or a delete of a
// schedule version, a version whose cutover is not in the future, one
// that removes an era and one with an unknown encoding; the schedule read
// back afterwards is the one the client wrote.
func TestStatusScheduleWritesValidated(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A short extension: the valid-through stays near now.
	db, err := client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{StatusScheduleExtension: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	changed, err := db.SetStatusEncoding(ctx, "tickets")
	if err != nil {
		t.Fatalf("SetStatusEncoding(tickets): %v", err)
	}
	if n := len(changed.Eras); n != 2 || changed.Eras[0].Encoding != "tickets-mix" || changed.Eras[1].Encoding != "tickets" {
		t.Fatalf("schedule after the change: %+v", changed)
	}
	if _, err := db.SetStatusEncoding(ctx, "tickets"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a second change to tickets: %v, want ErrInvalidArgument", err)
	}
	now, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A cutover above the valid-through and the last era's start but not
	// above the node's timestamp: wait until the oracle is past the
	// change's cutover (StatusCutoverLead, within the test's bound), then
	// read the newest version (the first Put may have started an
	// extension ahead, which has finished by then; nothing begins a
	// transaction from here on).
	for now <= changed.Eras[1].From+1 {
		time.Sleep(50 * time.Millisecond)
		if now, err = db.Timestamp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	latest, err := db.StatusEncodingSchedule(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if latest.ValidThrough >= now {
		t.Fatalf("schedule valid through %d, past the oracle's %d: nothing extended it that far", latest.ValidThrough, now)
	}
	settings := db.Settings()
	enc := func(name string) txnstatus.Encoding {
		e, err := txnstatus.Named(name, settings.GetTicketsPartitioningQuantum(), settings.GetTicketsRowsPerQuantum())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cur := txnstatus.Schedule{ValidThrough: latest.ValidThrough}
	for _, e := range latest.Eras {
		cur.Eras = append(cur.Eras, txnstatus.Era{From: e.From, Encoding: enc(e.Encoding)})
	}
	next := keys.StatusScheduleKey(latest.Version + 1)
	rc := newRaw(t, c.Addrs())
	refused := func(what string, ru *rpcpb.RequestUnion, want string) {
		t.Helper()
		resp := rc.send(ru.Key(), ru)
		if resp.Error.GetCode() != rpcpb.ErrorCode_INVALID_ARGUMENT || !strings.Contains(resp.Error.GetMessage(), want) {
			t.Fatalf("%s: got %v (responses %v), want INVALID_ARGUMENT naming %q", what, resp.Error, resp.Responses, want)
		}
	}
	put := func(s txnstatus.Schedule) *rpcpb.RequestUnion {
		b, err := txnstatus.EncodeSchedule(s)
		if err != nil {
			t.Fatal(err)
		}
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{Key: next, Value: b}}}
	}
	refused("a plain put of a version", &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{
		Key: keys.StatusScheduleKey(latest.Version), Value: []byte("x")}}}, "existing versions may not be altered or removed")
	refused("a delete of a version", &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{
		Key: keys.StatusScheduleKey(latest.Version), Delete: true}}}, "existing versions may not be altered or removed")
	from := max(cur.ValidThrough, cur.Eras[1].From) + 1
	if from >= now {
		t.Fatalf("cutover %d not below the oracle's %d", from, now)
	}
	past, err := cur.Switch(enc("v1"), from)
	if err != nil {
		t.Fatal(err)
	}
	refused("a cutover in the past", put(past), "not in the future")
	refused("an era removed", put(txnstatus.NewSchedule(enc("tickets-mix"), cur.ValidThrough)), "may not be removed")
	b, err := txnstatus.EncodeSchedule(cur)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-17] = 7 // the last era's kind
	refused("an unknown encoding", &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{Key: next, Value: b}}}, "unknown kind 7")

	got, err := db.StatusEncodingSchedule(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != latest.Version || len(got.Eras) != 2 || got.Eras[1] != changed.Eras[1] {
		t.Fatalf("schedule after the refusals: %+v, want %+v", got, latest)
	}
	// Transactions keep working.
	if err := db.Put(ctx, []byte("k"), []byte("w")); err != nil {
		t.Fatal(err)
	}
}
