package eval

import (
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPlainScanRefusesUserKeys: a plain scan that reaches the user
// keyspace is refused (a user key's plain slot holds protocol records),
// one that ends right at it is served.
func TestPlainScanRefusesUserKeys(t *testing.T) {
	eng, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c := Context{Desc: &rpcpb.RangeDescriptor{RangeId: 1, StartKey: keys.MinKey, EndKey: keys.MaxKey}}
	for _, tc := range []struct {
		start, end []byte
		refused    bool
	}{
		{keys.StatusPrefix, keys.UserPrefix, false},
		{keys.StatusPrefix, keys.UserKey([]byte("a")), true},
		{keys.UserKey(nil), keys.UserEnd, true},
		{keys.UserKey([]byte("z")), keys.MaxKey, true},
		{keys.UserEnd, keys.MaxKey, false},
	} {
		req := &rpcpb.BatchRequest{RangeId: 1, Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_PlainScan{
			PlainScan: &rpcpb.PlainScanRequest{Start: tc.start, End: tc.end}}}}}
		snap := eng.NewSnapshot()
		resp := EvalRead(c, snap, req)
		snap.Close()
		refused := resp.Error.GetCode() == rpcpb.ErrorCode_INVALID_ARGUMENT && strings.Contains(resp.Error.GetMessage(), "user keys")
		if refused != tc.refused {
			t.Errorf("[%q, %q): refused=%v, want %v (%v)", tc.start, tc.end, refused, tc.refused, resp.Error)
		}
	}
}
