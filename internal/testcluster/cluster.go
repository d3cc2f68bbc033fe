package testcluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/canopy-db/canopy/internal/storage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Options configure a Cluster. Zero fields take defaults.
type Options struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// Dir holds the stores; default: a new temporary directory, removed by
	// Close.
	Dir string
	// InitialRanges pre-splits the user keyspace (default 1).
	InitialRanges int
	// ReplicationFactor (default 3, capped at Nodes).
	ReplicationFactor int
	// StatusEncoding is "tickets-mix" (default: kvserver.DefaultStatusEncoding),
	// "tickets" or "v1".
	StatusEncoding string
	// CommitProtocol is the cluster's commit protocol
	// (internal/commitprotocol; "" = default).
	CommitProtocol string
	// TickInterval of Raft (default 50ms: faster failover in tests).
	TickInterval time.Duration
	// QuiesceIdleTicks of the nodes (default 0: see
	// kvserver.Config.QuiesceIdleTicks).
	QuiesceIdleTicks int
	// ReadyTimeout bounds the wait for every range to have a leader
	// (default 60s).
	ReadyTimeout time.Duration
	// GCTTL and GCInterval of version GC (kvserver defaults if zero).
	GCTTL      time.Duration
	GCInterval time.Duration
	// LockWaitMax of the nodes (kvserver default if zero).
	LockWaitMax time.Duration
	// RangeSplitBytes of the nodes (kvserver default if zero).
	RangeSplitBytes int64
	// RangeSplitQPS and LoadSplitAfter of the nodes (kvserver defaults if
	// zero).
	RangeSplitQPS  int
	LoadSplitAfter time.Duration
	Storage        storage.Options
	Logger         *slog.Logger
	// CertsDir, if set, holds the cluster's certificates (ca.crt,
	// node.crt/key for 127.0.0.1, client.root.crt/key; see
	// security.CreateNode): the nodes run with mutual TLS and the
	// bootstrap uses the root client certificate. Default: insecure.
	CertsDir string
	// Hierarchy, if set, makes the cluster run a hierarchy commit protocol
	// with these settings (kvserver.ValidateHierarchySettings fills the
	// defaults: the locking variant, one leaf per node under one root).
	Hierarchy *rpcpb.HierarchySettings
}

// Cluster is a running in-process cluster.
type Cluster struct {
	opts   Options
	dir    string
	ownDir bool
	addrs  []string

	mu    sync.Mutex
	nodes []*kvserver.Node // nil while stopped
}

// Start starts the nodes, bootstraps the cluster and waits until every
// range has a leader.
func Start(opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.InitialRanges == 0 {
		opts.InitialRanges = 1
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = 50 * time.Millisecond
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	c := &Cluster{opts: opts, dir: opts.Dir}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "canopy-cluster-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = d, true
	}
	// Listen first so every node knows every address before it starts;
	// the listeners are handed to the nodes, leaving no window in which
	// another process could take a port.
	var lis []net.Listener
	for i := 0; i < opts.Nodes; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lis {
				_ = l.Close()
			}
			return nil, err
		}
		lis = append(lis, l)
		c.addrs = append(c.addrs, l.Addr().String())
	}
	c.nodes = make([]*kvserver.Node, opts.Nodes)
	for i := range c.addrs {
		if err := c.startNode(i, lis[i]); err != nil {
			for _, l := range lis[i+1:] {
				_ = l.Close()
			}
			c.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.ReadyTimeout)
	defer cancel()
	creds := insecure.NewCredentials()
	if opts.CertsDir != "" {
		cfg, err := security.LoadClientTLS(opts.CertsDir, security.AdminUserDefault)
		if err != nil {
			c.Close()
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(c.addrs[0], grpc.WithTransportCredentials(creds))
	if err != nil {
		c.Close()
		return nil, err
	}
	defer conn.Close()
	resp, err := rpcpb.NewKVClient(conn).Bootstrap(ctx, &rpcpb.BootstrapRequest{
		InitialRanges: uint32(opts.InitialRanges),
		Settings: &rpcpb.ClusterSettings{
			StatusEncoding:    opts.StatusEncoding,
			ReplicationFactor: uint32(opts.ReplicationFactor),
			CommitProtocol:    opts.CommitProtocol,
			Hierarchy:         opts.Hierarchy,
		},
	})
	if err == nil && resp.Error != nil {
		err = fmt.Errorf("bootstrap: %s", resp.Error.Message)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startNode(i int, lis net.Listener) error {
	var certs *security.NodeCerts
	if c.opts.CertsDir != "" {
		var err error
		if certs, err = security.LoadNodeCerts(c.opts.CertsDir); err != nil {
			if lis != nil {
				_ = lis.Close()
			}
			return err
		}
	}
	n, err := kvserver.Start(kvserver.Config{
		Certs:            certs,
		Insecure:         certs == nil,
		StoreDir:         filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
		ListenAddr:       c.addrs[i],
		Listener:         lis,
		Join:             c.addrs,
		TickInterval:     c.opts.TickInterval,
		QuiesceIdleTicks: c.opts.QuiesceIdleTicks,
		GCTTL:            c.opts.GCTTL,
		GCInterval:       c.opts.GCInterval,
		LockWaitMax:      c.opts.LockWaitMax,
		RangeSplitBytes:  c.opts.RangeSplitBytes,
		RangeSplitQPS:    c.opts.RangeSplitQPS,
		LoadSplitAfter:   c.opts.LoadSplitAfter,
		Storage:          c.opts.Storage,
		Logger:           c.opts.Logger,
	})
	if err != nil {
		return fmt.Errorf("starting node %d: %w", i+1, err)
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	return nil
}

// Addrs returns the nodes' addresses (node i+1 at index i).
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Dir returns the directory holding the stores.
func (c *Cluster) Dir() string { return c.dir }

// Node returns node i (0-based), or nil while it is stopped.
func (c *Cluster) Node(i int) *kvserver.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// StopNode stops node i (0-based). Its store stays on disk.
func (c *Cluster) StopNode(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n != nil {
		n.Stop()
	}
}

// RestartNode starts node i again from its store, on the same address.
// It tries for up to RestartAddressWaitMax: while the node was down, its
// port was free, and another process (other tests run side by side) may
// hold it for a while.
func (c *Cluster) RestartNode(i int) error {
	var err error
	for deadline := time.Now().Add(RestartAddressWaitMax); ; {
		if err = c.startNode(i, nil); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RestartAddressWaitMax bounds RestartNode's wait for the node's address.
const RestartAddressWaitMax = 30 * time.Second

// LeaderOf returns the 0-based index of the node leading rangeID, or -1.
func (c *Cluster) LeaderOf(rangeID uint64) int {
	for i := range c.addrs {
		n := c.Node(i)
		if n == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := n.Status(ctx)
		cancel()
		if err != nil {
			continue
		}
		for _, r := range st.Ranges {
			if r.Range.GetRangeId() == rangeID && r.LeaderNodeId == st.NodeId {
				return i
			}
		}
	}
	return -1
}

// WaitReady waits until every range held by a running node has a leader.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		ready := true
		for i := range c.addrs {
			n := c.Node(i)
			if n == nil {
				continue
			}
			st, err := n.Status(ctx)
			if err != nil || !st.Bootstrapped || len(st.Ranges) == 0 {
				ready = false
				break
			}
			for _, r := range st.Ranges {
				if r.LeaderNodeId == 0 {
					ready = false
				}
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: ranges without a leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops every node and removes the directory if Start made it.
func (c *Cluster) Close() {
	for i := range c.nodes {
		c.StopNode(i)
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}
