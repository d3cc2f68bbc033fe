package etcdapi_test

import (
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCommitProtocols runs the etcd API on a cluster of each commit
// protocol other than the default: on 2pc-locking puts, gets and
// transactions work; on the hierarchy protocols, whose transactions may not
// read a range and write, a write is refused with FailedPrecondition
// naming the protocol, and reads are served.
func TestCommitProtocols(t *testing.T) {
	for _, p := range []string{"2pc-locking", "hierarchy-locking", "hierarchy-timestamps"} {
		t.Run(p, func(t *testing.T) {
			c, err := testcluster.Start(testcluster.Options{Nodes: 3, Dir: t.TempDir(), CommitProtocol: p})
			if err != nil {
				t.Fatalf("starting cluster: %v", err)
			}
			t.Cleanup(c.Close)
			cli := newClient(t, c.Addrs()...)
			ctx := testCtx(t)
			_, err = cli.Put(ctx, "a", "1")
			if p == "2pc-locking" {
				if err != nil {
					t.Fatalf("put: %v", err)
				}
				r := must(cli.Get(ctx, "a"))(t)
				if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "1" || r.Kvs[0].Version != 1 {
					t.Fatalf("get a: %v", r.Kvs)
				}
				return
			}
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), p) {
				t.Fatalf("put on a %s cluster: %v, want FailedPrecondition naming the protocol", p, err)
			}
			r := must(cli.Get(ctx, "a"))(t)
			if len(r.Kvs) != 0 {
				t.Fatalf("get a after a refused put: %v", r.Kvs)
			}
		})
	}
}
