package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/tso"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults and limits (Options).
const (
	// DefaultLeaseCheckInterval is how often a node looks for expired
	// leases.
	DefaultLeaseCheckInterval = 500 * time.Millisecond
	// DefaultProgressInterval is how often a watch created with
	// progress_notify and otherwise idle gets a progress notification
	// (etcd's is 10 minutes; Canopy's resolved timestamps make it cheap).
	DefaultProgressInterval = 10 * time.Second
	// DefaultTxnOpsMax is the most operations in one branch of a Txn
	// (etcd's --max-txn-ops default).
	DefaultTxnOpsMax = 128
	// DefaultRangeKeysMax is the most keys one Range, DeleteRange or
	// compare reads.
	DefaultRangeKeysMax = 100_000
	// DefaultWatchersPerStreamMax bounds the watches of one Watch stream.
	DefaultWatchersPerStreamMax = 1000
	// DefaultWatchEventsBufferedMax bounds the events one watch holds
	// while it waits for a resolved timestamp to release them in revision
	// order; past it the watch is cancelled.
	DefaultWatchEventsBufferedMax = 100_000
	// LeaseTTLMinSeconds is the shortest lease granted: a shorter
	// request gets this TTL (etcd rounds up the same way, to about 1.5
	// election timeouts).
	LeaseTTLMinSeconds = 2
	// LeaseTTLMaxSeconds is etcd's MaxLeaseTTL.
	LeaseTTLMaxSeconds = 9_000_000_000
	// RevokeChunkKeys is how many keys of a lease one revocation
	// transaction deletes; a lease with more is revoked in several
	// (docs/ETCD-API.md).
	RevokeChunkKeys = 1000
	// ServerVersion is the etcd version reported by Status: the API
	// version Canopy implements.
	ServerVersion = "3.6.0"
	// scanPageKeys is the page size of the scans of the etcd keyspace.
	scanPageKeys = 1000
)

// Options configures a Server. Zero fields take defaults.
type Options struct {
	// Open opens the Canopy client the API runs over. It is called on
	// the first request and again after a failure (e.g. before the
	// cluster is initialized). Required.
	Open func(ctx context.Context) (*client.DB, error)
	// NodeID returns this node's ID (0 before it has one): the member_id
	// of response headers. The lease expirer looks for leases once the
	// node has one (the cluster is initialized).
	NodeID func() uint64
	// Address is this node's address (the client URL of `member list`).
	Address string
	// TLS says whether clients reach the node over TLS (https URLs).
	TLS    bool
	Logger *slog.Logger

	LeaseCheckInterval     time.Duration
	ProgressInterval       time.Duration
	TxnOpsMax              int
	RangeKeysMax           int
	WatchersPerStreamMax   int
	WatchEventsBufferedMax int
}

func (o *Options) ensureDefaults() error {
	if o.Open == nil {
		return errors.New("etcdapi: Options.Open is required")
	}
	if o.NodeID == nil {
		o.NodeID = func() uint64 { return 0 }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{{&o.LeaseCheckInterval, DefaultLeaseCheckInterval}, {&o.ProgressInterval, DefaultProgressInterval}} {
		if *d.p < 0 {
			return fmt.Errorf("etcdapi: negative interval %v", *d.p)
		}
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	for _, d := range []struct {
		p   *int
		def int
	}{{&o.TxnOpsMax, DefaultTxnOpsMax}, {&o.RangeKeysMax, DefaultRangeKeysMax},
		{&o.WatchersPerStreamMax, DefaultWatchersPerStreamMax}, {&o.WatchEventsBufferedMax, DefaultWatchEventsBufferedMax}} {
		if *d.p < 0 {
			return fmt.Errorf("etcdapi: negative limit %d", *d.p)
		}
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	return nil
}

// Server serves etcd's KV, Watch, Lease, Cluster and Maintenance services
// over a Canopy cluster. See doc.go.
type Server struct {
	opts Options
	log  *slog.Logger
	// openMu serializes opening the client.
	openMu sync.Mutex
	mu     struct {
		sync.Mutex
		// db is the open client (nil until the first success).
		db        *client.DB
		clusterID uint64
		// serving: this node has answered an etcd request, or found
		// leases in the cluster when it started (checked): its lease
		// expirer runs. A node nobody uses through the etcd API, in a
		// cluster without leases, spends nothing on it.
		serving, checked bool
	}
	stop chan struct{}
	wg   sync.WaitGroup
}

// New returns a Server; Register puts its services on a gRPC server and
// Start starts the lease expirer.
func New(o Options) (*Server, error) {
	if err := o.ensureDefaults(); err != nil {
		return nil, err
	}
	return &Server{opts: o, log: o.Logger.With("component", "etcdapi"), stop: make(chan struct{})}, nil
}

// Register registers the etcd services on g (before g serves).
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, &kvServer{s: s})
	pb.RegisterWatchServer(g, &watchServer{s: s})
	pb.RegisterLeaseServer(g, &leaseServer{s: s})
	pb.RegisterClusterServer(g, &clusterServer{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s: s})
}

// Start starts the lease expirer: every LeaseCheckInterval (with
// jitter) it revokes the leases whose TTL has run out.
func (s *Server) Start() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			d := s.opts.LeaseCheckInterval
			d += time.Duration(rand.Int64N(int64(d)/2 + 1))
			select {
			case <-s.stop:
				return
			case <-time.After(d):
			}
			s.expireLeases()
		}
	}()
}

// stopping reports whether Close has begun (the client may be closed).
func (s *Server) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Close stops the expirer and closes the client.
func (s *Server) Close() {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	db := s.mu.db
	s.mu.db = nil
	s.mu.Unlock()
	if db != nil {
		_ = db.Close()
	}
}

// db returns the open client, opening it if needed.
func (s *Server) db(ctx context.Context) (*client.DB, error) {
	s.mu.Lock()
	db := s.mu.db
	s.mu.Unlock()
	if db != nil {
		return db, nil
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	s.mu.Lock()
	db = s.mu.db
	s.mu.Unlock()
	if db != nil {
		return db, nil
	}
	select {
	case <-s.stop:
		return nil, status.Error(codes.Unavailable, "etcdapi: node stopping")
	default:
	}
	db, err := s.opts.Open(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcdapi: cannot reach the Canopy cluster (is it initialized?): %v", err)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(db.Settings().GetClusterId()))
	s.mu.Lock()
	s.mu.db, s.mu.clusterID = db, h.Sum64()
	s.mu.Unlock()
	return db, nil
}

// header is a response header at revision rev. Every response of every
// service is given one, so it also marks the node as serving the etcd API
// (the lease expirer, which sends no response, never calls it).
func (s *Server) header(rev int64) *pb.ResponseHeader {
	s.mu.Lock()
	cid := s.mu.clusterID
	s.mu.serving = true
	s.mu.Unlock()
	return &pb.ResponseHeader{ClusterId: cid, MemberId: s.opts.NodeID(), Revision: rev, RaftTerm: 1}
}

// physicalMs is the oracle's milliseconds of a Canopy timestamp.
func physicalMs(ts uint64) int64 { return int64(ts >> tso.DefaultLogicalBits) }

// toStatus maps an error of the Canopy client (or of this package) to the
// gRPC status an etcd client understands. etcd's own errors (rpctypes)
// pass through.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Err()
	}
	switch {
	case errors.Is(err, client.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, client.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, client.ErrPermission):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, client.ErrAmbiguous):
		// etcd reports a proposal whose outcome is unknown as
		// Unavailable ("request timed out"), which its client does not
		// retry for writes; so does Canopy, saying what it means.
		return status.Error(codes.Unavailable, "etcdapi: outcome unknown, the write may have happened: "+err.Error())
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrRetryable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errCorrupt):
		return status.Error(codes.DataLoss, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

func errTooManyKeys(max int) error {
	return status.Errorf(codes.InvalidArgument, "etcdapi: more than %d keys (etcdapi.Options.RangeKeysMax)", max)
}
