package kvserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/canopy-db/canopy/internal/etcdapi"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/tso"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Config configures a Node. Zero fields take defaults.
type Config struct {
	// StoreDir is the directory of the node's engine. Required.
	StoreDir string
	// ListenAddr is the gRPC listen address, host:port. Port 0 picks one.
	ListenAddr string
	// Listener, if set, is used instead of listening on ListenAddr (tests
	// reserve ports this way without a window for others to take them).
	Listener net.Listener
	// AdvertiseAddr is the address peers and clients use; default: the
	// address actually listened on.
	AdvertiseAddr string
	// Join lists the addresses of every node of the cluster to form (this
	// node's included or not). Used by Bootstrap only.
	Join []string
	// TickInterval is Raft's tick (default 100ms). Elections take
	// ElectionTicks to 2*ElectionTicks ticks; heartbeats go every tick.
	TickInterval  time.Duration
	ElectionTicks int
	// QuiesceIdleTicks is how many idle ticks a range's leader waits
	// before the tick on which it quiesces the range (default 0,
	// replica.QuiesceIdleTicks: the first tick that finds it idle).
	QuiesceIdleTicks int
	// RequestTimeout bounds one request's wait for Raft (default 10s);
	// a write still in flight then is reported AMBIGUOUS.
	RequestTimeout time.Duration
	// LockWaitMax bounds one wait of a request, at the leaseholder, for
	// another transaction's intent to be resolved (default 50ms); the
	// client then takes over (status lookup, push).
	LockWaitMax time.Duration
	// BalanceInterval is how often leaders check leaseholder placement and
	// meta records (default 1s).
	BalanceInterval time.Duration
	// GCTTL is how long old versions stay readable (default 10 minutes):
	// a transaction older than this gets TS_BELOW_GC_THRESHOLD and retries.
	GCTTL time.Duration
	// RangeSplitBytes: a user range whose estimated size on disk passes
	// it is split in two by its leaseholder (autosplit.go). 0: the default
	// DefaultRangeSplitBytes; negative: never.
	RangeSplitBytes int64
	// RangeSplitQPS: a user range serving more requests a second than
	// this for LoadSplitAfter is split by load (loadsplit.go). 0: the
	// default DefaultRangeSplitQPS; negative: never.
	RangeSplitQPS int
	// LoadSplitAfter is how long a range must be hot before it is split by
	// load (default DefaultLoadSplitAfter).
	LoadSplitAfter time.Duration
	// GCInterval is how often a leader collects old versions of its
	// ranges (default 1 minute).
	GCInterval time.Duration
	Storage    storage.Options
	// StoreMinFreeBytes: below this much free space on the store's file
	// system, the node refuses new writes (diskspace.go). 0: 1% of the
	// file system, at least twice the memtable size, at most 1 GiB;
	// negative: no check.
	StoreMinFreeBytes int64
	// DiskCheckInterval is how often the free space is read (default 1s);
	// DiskFullLogInterval how often, at most, a low disk is logged
	// (default 10s).
	DiskCheckInterval   time.Duration
	DiskFullLogInterval time.Duration
	// RaftScheduler configures the node's Raft scheduler (workers, group
	// commit); its Engine is the node's.
	RaftScheduler replica.SchedulerConfig
	Logger        *slog.Logger
	// HTTPAddr, if not empty, is where the node serves HTTP: Prometheus
	// metrics at /metrics, health at /health (http.go). Port 0 picks one.
	// HTTPListener, if set, is used instead.
	HTTPAddr     string
	HTTPListener net.Listener
	// DeadNodeTimeout: a node not heard from for this long is dead: the
	// replicate queue rebuilds its replicas on other nodes (default
	// DefaultDeadNodeTimeout, at least DeadNodeTimeoutMin).
	DeadNodeTimeout time.Duration
	// ScrubInterval: how often the node reads every value of every
	// replica it holds to verify it (scrub.go); 0 means
	// DefaultScrubInterval, negative never.
	ScrubInterval time.Duration
	// MembersRefreshInterval is how often the node reads the cluster's
	// members (membership.go; default DefaultMembersRefreshInterval).
	MembersRefreshInterval time.Duration
	// ReplicateChangesMax bounds the replica changes the node's replicate
	// queue makes in one balance round (default
	// DefaultReplicateChangesMax).
	ReplicateChangesMax int
	// Metrics is the registry the node's metrics (and those of its engine,
	// Raft scheduler and oracle) are registered on, and that /metrics
	// serves. nil: a registry of the node's own.
	Metrics *prometheus.Registry
	// ClosedTimestampInterval is how often the node closes timestamps on
	// the ranges watched here (default DefaultClosedTimestampInterval):
	// about how far a watcher's resolved timestamps lag (feed.go).
	ClosedTimestampInterval time.Duration
	// FeedEventsMax and FeedBytesMax bound one watcher's buffer of events
	// at a range (defaults changefeed.DefaultEventsMax, DefaultBytesMax);
	// a watcher that lets it overflow is cancelled (SLOW_CONSUMER).
	FeedEventsMax int
	FeedBytesMax  int64
	// FaultInjection serves /debug/fault on the HTTP server (faultinject.go):
	// for nemesis runs only, never on by default.
	FaultInjection bool

	// Certs are the node's certificates (security.LoadNodeCerts): with
	// them, every gRPC connection to and from the node is mutual TLS, every
	// RPC is authorized by its caller's certificate (auth.go), and HTTP is
	// HTTPS. Exactly one of Certs and Insecure must be set.
	Certs *security.NodeCerts
	// Insecure runs the node without TLS and without authorization: anyone
	// who can reach its ports can read, write and administer the cluster.
	// It must be asked for explicitly (`canopy start --insecure`); the
	// node logs a warning.
	Insecure bool
	// AdminUser is the user whose client certificate may call the
	// administrative RPCs (default security.AdminUserDefault, "root").
	AdminUser string
	// EtcdAPI configures the etcd v3 API the node serves on its gRPC port
	// (etcd.go); Open, NodeID, Address, TLS and Logger are the node's.
	EtcdAPI etcdapi.Options
}

func (c *Config) ensureDefaults() error {
	if c.StoreDir == "" {
		return errors.New("kvserver: StoreDir is required")
	}
	c.wrapFaultFS() // faultinject.go
	if c.ListenAddr == "" {
		c.ListenAddr = "127.0.0.1:26257"
	}
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.QuiesceIdleTicks < 0 {
		return fmt.Errorf("kvserver: QuiesceIdleTicks %d is negative", c.QuiesceIdleTicks)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.LockWaitMax == 0 {
		c.LockWaitMax = DefaultLockWaitMax
	}
	if c.BalanceInterval == 0 {
		c.BalanceInterval = time.Second
	}
	if c.GCTTL == 0 {
		c.GCTTL = 10 * time.Minute
	}
	if c.RangeSplitBytes == 0 {
		c.RangeSplitBytes = DefaultRangeSplitBytes
	}
	if c.RangeSplitQPS == 0 {
		c.RangeSplitQPS = DefaultRangeSplitQPS
	}
	if c.LoadSplitAfter == 0 {
		c.LoadSplitAfter = DefaultLoadSplitAfter
	}
	if c.GCInterval == 0 {
		c.GCInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = DefaultDiskCheckInterval
	}
	if c.ClosedTimestampInterval == 0 {
		c.ClosedTimestampInterval = DefaultClosedTimestampInterval
	}
	if c.FeedEventsMax < 0 || c.FeedBytesMax < 0 {
		return fmt.Errorf("kvserver: Config.FeedEventsMax (%d) and FeedBytesMax (%d) must not be negative", c.FeedEventsMax, c.FeedBytesMax)
	}
	for name, d := range map[string]time.Duration{
		"TickInterval": c.TickInterval, "RequestTimeout": c.RequestTimeout, "BalanceInterval": c.BalanceInterval,
		"GCTTL": c.GCTTL, "GCInterval": c.GCInterval, "DiskCheckInterval": c.DiskCheckInterval,
		"ClosedTimestampInterval": c.ClosedTimestampInterval,
		"LoadSplitAfter":          c.LoadSplitAfter,
	} {
		if d < 0 {
			return fmt.Errorf("kvserver: Config.%s is negative (%v)", name, d)
		}
	}
	if c.DeadNodeTimeout == 0 {
		c.DeadNodeTimeout = DefaultDeadNodeTimeout
	}
	if c.ScrubInterval == 0 {
		c.ScrubInterval = DefaultScrubInterval
	}
	if c.DeadNodeTimeout < DeadNodeTimeoutMin {
		return fmt.Errorf("kvserver: Config.DeadNodeTimeout %v is below DeadNodeTimeoutMin (%v)", c.DeadNodeTimeout, DeadNodeTimeoutMin)
	}
	if c.MembersRefreshInterval == 0 {
		c.MembersRefreshInterval = DefaultMembersRefreshInterval
	}
	if c.ReplicateChangesMax == 0 {
		c.ReplicateChangesMax = DefaultReplicateChangesMax
	}
	if c.MembersRefreshInterval < 0 || c.ReplicateChangesMax < 0 {
		return fmt.Errorf("kvserver: Config.MembersRefreshInterval (%v) and ReplicateChangesMax (%d) must not be negative", c.MembersRefreshInterval, c.ReplicateChangesMax)
	}
	if c.DiskFullLogInterval == 0 {
		c.DiskFullLogInterval = DefaultDiskFullLogInterval
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	switch {
	case c.Certs == nil && !c.Insecure:
		return errors.New("kvserver: no certificates (Config.Certs) and Config.Insecure not set: a node runs without TLS and authorization only when asked to")
	case c.Certs != nil && c.Insecure:
		return errors.New("kvserver: Config.Certs and Config.Insecure are both set")
	}
	if c.AdminUser == "" {
		c.AdminUser = security.AdminUserDefault
	}
	if err := security.CheckUserName(c.AdminUser); err != nil {
		return fmt.Errorf("kvserver: Config.AdminUser: %w", err)
	}
	if c.AdminUser == security.NodeUser {
		return fmt.Errorf("kvserver: Config.AdminUser %q is the nodes' own user", c.AdminUser)
	}
	c.Storage.Metrics, c.RaftScheduler.Metrics = c.Metrics, c.Metrics
	return nil
}

// Node is one Canopy server process's store.
type Node struct {
	faults faultHooks // faultinject.go
	// started is when Start was called (NodeStatus's start time).
	started time.Time
	// schedule is the status encoding schedule as this node last read it,
	// for its status-table metrics (status_schedule.go).
	schedule nodeSchedule
	cfg      Config
	// etcd serves the etcd v3 API (etcd.go).
	etcd *etcdapi.Server
	eng  *storage.Engine
	// outSnaps holds the engine snapshots of Raft snapshots not yet
	// streamed; snapshotRecv and snapshotSend bound the snapshot streams
	// received and sent at once (snapshot.go).
	outSnaps     snapshotRegistry
	snapshotRecv chan struct{}
	snapshotSend chan struct{}
	lis          net.Listener
	srv          *grpc.Server
	transport    *transport
	// sched processes the Ready work of every replica on the node.
	sched  *replica.Scheduler
	oracle *tso.Oracle
	// detector finds cycles of waits across the node's lock tables.
	detector *concurrency.Detector
	// tsBatcher batches this node's requests to the oracle.
	tsBatcher *tso.Batcher
	// liveness records when each peer was last heard from (liveness.go).
	liveness *liveness
	// metaChecked[rangeID] is the generation of the range's descriptor
	// whose meta record balance last found (or made) true. A meta record
	// is replaced only by one of a newer generation (rangeSM's MetaUpdate),
	// so one check per generation suffices; checking every led range every
	// BalanceInterval kept range 1 awake and cost a meta lookup per range
	// per second. Only balance uses it.
	metaChecked map[uint64]uint64
	log         *slog.Logger
	// votesFrom: before this time the node grants no votes (see
	// receiveRaft). Set at start for a store that was already in a cluster.
	votesFrom time.Time
	// identityLog rate-limits refusals of other clusters' RPCs (identity.go).
	identityLog identityLog
	// lastDead: the peers tick found not live last time (only tick uses it).
	lastDead map[uint64]bool
	// createMu serializes replica creation (newReplicaPeer).
	createMu sync.Mutex
	// ticks counts tick's rounds (tick's goroutine only): the liveness
	// beat goes every LivenessBeatTicks of them.
	ticks uint64
	// splitChecked: size-based split checks that found no split, by range
	// (only the balance loop uses it; autosplit.go).
	splitChecked map[uint64]splitCheck
	// damage: the damaged replicas reported to this node as a leader
	// (damage.go).
	damage damageReports

	mu struct {
		sync.RWMutex
		nodeID   uint64
		settings *rpcpb.ClusterSettings
		// protocol: the server side of settings' commit protocol
		// (protocol.go), set with settings; nil before init.
		protocol serverProtocol
		nodes    map[uint64]string
		replicas map[uint64]*rangeReplica
		// refuseVotes: until when a replica created for a range refuses
		// votes (startRange replaced one there; see RefuseVotesUntil).
		refuseVotes map[uint64]time.Time
		conns       map[string]*grpc.ClientConn
		// oracleTerm is the Raft term in which this node leads range 1
		// and hosts the oracle; 0 when it does not.
		oracleTerm uint64
		// members: the cluster's members as last read (membership.go).
		members members
	}
	// storeID is the random ID of the store (membership.go).
	storeID string
	// protocolStart: the commit protocol is started at most once
	// (protocol.go).
	protocolStart sync.Once
	// joinMu serializes join (a Join from `canopy init`, and this node's
	// own request to join a running cluster).
	joinMu sync.Mutex
	// replicate: what the replicate queue remembers (replicate.go); only
	// the balance loop uses it.
	replicate replicateState
	// active is the set of replicas that may not be quiescent, by range
	// ID: tick's working set. A replica joins it when created and when it
	// wakes (replica.Config.OnWake); tick drops the quiescent ones. So a
	// tick costs nothing per quiescent replica. balanceDue collects the
	// ranges that were active since the last balance round.
	// localMembers caches membersFrom's result on this node's replica of
	// range 1 by that replica's applied index (membership.go).
	localMembers struct {
		sync.Mutex
		applied   uint64
		ms        []*rpcpb.MemberInfo
		placement string
	}
	// leases: the lease placement setting as last read, and the oracle's
	// host as last known (placement.go).
	leases     leaseState
	activeMu   sync.Mutex
	active     map[uint64]struct{}
	balanceDue map[uint64]struct{}
	balanceRun int
	// leaderPreference: see SetLeaderPreference (bench_hooks.go).
	leaderPreference leaderPreference
	// gcState: what version GC rounds remember per range (gc.go), under
	// gcMu, held for a whole round.
	gcMu    sync.Mutex
	gcState map[uint64]gcRangeState
	// stagingClean: per status range, its data-change count at the last
	// status-table GC that scanned it in full (gc.go), under gcMu.
	stagingClean map[uint64]uint64
	bootstrapMu  sync.Mutex
	stopc        chan struct{}
	// stopCtx ends when the node stops (stopCancel, called by Stop): work
	// done for several callers at once is bounded by it, not by a caller.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	wg         sync.WaitGroup
	// handlers counts RPC handlers in flight: grpc.Server.Stop cancels
	// them but does not wait, and they read the engine, so Stop waits
	// for them before closing it.
	handlers sync.WaitGroup
	// handlersMu orders handlers.Add against Stop's handlers.Wait.
	handlersMu      sync.RWMutex
	handlersStopped bool
	// failure is set when the store is found damaged while running
	// (storecheck.go).
	failure storeFailure
	// disk watches the free space of the store's disk (diskspace.go).
	disk *diskMonitor
	// ops: metrics, health and the HTTP server (http.go).
	ops ops
	// feeds: the ranges with a rangefeed processor here, by range ID, and
	// feedCandidate the last timestamp closeTimestamps took (feed.go).
	feedsMu       sync.Mutex
	feeds         map[uint64]*rangeReplica
	feedCandidate atomic.Uint64
	// hierReadFloor is the highest timestamp a transactional read was
	// served at here (raised under the read's latches); the hierarchy
	// leaf observes it before it validates a part (hierarchy_part.go).
	hierReadFloor atomic.Uint64
	// hier runs the hierarchy protocols' validators when the cluster's
	// settings ask for them (hierarchy.go); nil otherwise.
	hier atomic.Pointer[hierRuntime]
}

// trackHandler is a unary interceptor counting handlers in flight.
func (n *Node) trackHandler(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	n.handlersMu.RLock()
	if n.handlersStopped {
		n.handlersMu.RUnlock()
		return nil, status.Error(codes.Unavailable, "node is stopping")
	}
	n.handlers.Add(1)
	n.handlersMu.RUnlock()
	defer n.handlers.Done()
	return h(ctx, req)
}

// Node-local keys.
var (
	nodeIdentKey = storage.NodeLocalKey("ident")
)

// Start opens the store, loads its ranges and serves until Stop.
func Start(cfg Config) (*Node, error) {
	if err := cfg.ensureDefaults(); err != nil {
		return nil, err
	}
	disk, err := newDiskMonitor(&cfg) // diskspace.go: refuses a full disk
	if err != nil {
		return nil, err
	}
	eng, err := openStore(cfg.StoreDir, cfg.Storage) // storecheck.go
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, eng: eng, log: cfg.Logger, stopc: make(chan struct{}), disk: disk, started: time.Now()}
	n.failure.init()
	n.stopCtx, n.stopCancel = context.WithCancel(context.Background())
	if err := n.initOps(); err != nil {
		_ = eng.Close()
		return nil, err
	}
	eng.SetCorruptionHandler(n.onCorruption) // damage.go
	n.mu.nodes = map[uint64]string{}
	n.mu.replicas = map[uint64]*rangeReplica{}
	n.mu.refuseVotes = map[uint64]time.Time{}
	n.active, n.balanceDue = map[uint64]struct{}{}, map[uint64]struct{}{}
	n.gcState, n.splitChecked = map[uint64]gcRangeState{}, map[uint64]splitCheck{}
	n.stagingClean = map[uint64]uint64{}
	n.mu.conns = map[string]*grpc.ClientConn{}
	n.feeds = map[uint64]*rangeReplica{}
	schedCfg := cfg.RaftScheduler
	schedCfg.Engine = eng
	if n.sched, err = replica.NewScheduler(schedCfg); err != nil {
		n.unregisterOps()
		_ = eng.Close()
		return nil, err
	}
	n.transport = newTransport(n)
	n.liveness = newLiveness(cfg.ElectionTicks)
	n.metaChecked = map[uint64]uint64{}
	n.oracle = tso.New(tso.Options{Metrics: n.ops.metrics.tso, Clock: n.oracleClock()}, &oraclePersister{n: n})
	n.tsBatcher = tso.NewBatcher(NodeTimestampBatchMax, n.fetchTimestamps)
	n.tsBatcher.SetMetrics(n.ops.metrics.tso)
	n.detector = concurrency.NewDetector()

	lis := cfg.Listener
	if lis == nil {
		if lis, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			n.sched.Close()
			_ = eng.Close()
			return nil, fmt.Errorf("kvserver: listen on %s: %w", cfg.ListenAddr, err)
		}
	}
	n.lis = lis
	if n.cfg.AdvertiseAddr == "" {
		n.cfg.AdvertiseAddr = lis.Addr().String()
	}
	if err := n.loadIdent(); err != nil {
		_ = lis.Close()
		n.sched.Close()
		_ = eng.Close()
		return nil, err
	}
	if n.NodeID() != 0 {
		n.votesFrom = time.Now().Add(n.leaseDuration())
	}
	n.snapshotRecv, n.snapshotSend = make(chan struct{}, SnapshotStreamsMax), make(chan struct{}, SnapshotStreamsMax)
	n.cleanSnapshots(true)
	if err := recoverSnapshotApplies(eng, n.log); err != nil {
		_ = lis.Close()
		n.sched.Close()
		_ = eng.Close()
		return nil, fmt.Errorf("kvserver: store %s: %w", cfg.StoreDir, err)
	}
	if n.storeID, err = n.loadStoreID(); err != nil { // membership.go
		_ = lis.Close()
		n.sched.Close()
		_ = eng.Close()
		return nil, err
	}
	if err := n.loadRanges(); err != nil {
		_ = lis.Close()
		for _, rr := range n.replicaList() {
			rr.r.Stop()
		}
		n.sched.Close()
		_ = eng.Close()
		return nil, err
	}
	srvOpts := append(rpc.ServerOptions(), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20),
		grpc.Creds(n.serverCredentials()), // auth.go
		// Handlers run on long-lived workers instead of a new goroutine
		// per RPC: a fresh goroutine starts with a small stack and grows it
		// (runtime.newstack copying the stack) on every Batch, whose
		// evaluation goes deep into Pebble's iterators; that copying was
		// 7% of a node's CPU under puts. Past grpcStreamWorkers RPCs at
		// once, gRPC starts goroutines as before.
		grpc.NumStreamWorkers(grpcStreamWorkers),
		// Metrics first: an RPC refused by the authorization or identity
		// check is counted (grpc_server_handled_total, PermissionDenied,
		// Unauthenticated, FailedPrecondition). Authorization before
		// identity: a caller without the right certificate learns nothing
		// about the cluster.
		grpc.ChainUnaryInterceptor(n.ops.metrics.grpc.UnaryServerInterceptor(), n.authUnary, n.identityUnary, n.trackHandler, n.faultUnary),
		grpc.ChainStreamInterceptor(n.ops.metrics.grpc.StreamServerInterceptor(), n.authStream, n.identityStream))
	n.srv = grpc.NewServer(srvOpts...)
	n.logSecurity()
	rpcpb.RegisterKVServer(n.srv, &kvService{n: n})
	rpcpb.RegisterInternalServer(n.srv, &internalService{n: n})
	rpcpb.RegisterSnapshotsServer(n.srv, &snapshotsService{n: n})
	rpcpb.RegisterFeedServer(n.srv, &feedService{n: n})
	if err := n.startEtcdAPI(); err != nil { // etcd.go
		_ = lis.Close()
		for _, rr := range n.replicaList() {
			rr.r.Stop()
		}
		n.sched.Close()
		_ = eng.Close()
		return nil, err
	}
	rpcpb.RegisterHierarchyServer(n.srv, &hierarchyService{n: n}) // hierarchy_link.go
	n.registerOps()                                               // http.go: gRPC health service
	n.wg.Add(6)
	go n.runEvery(n.cfg.ClosedTimestampInterval, n.closeTimestamps) // feed.go
	go func() { defer n.wg.Done(); _ = n.srv.Serve(lis) }()
	go n.runEvery(n.cfg.DiskCheckInterval, func() { n.disk.check(time.Now()) })
	go n.runEvery(n.cfg.TickInterval, n.tick)
	go n.runEvery(n.cfg.BalanceInterval, n.balance)
	go n.runEvery(n.cfg.GCInterval, n.collectLedRanges)
	n.wg.Add(1)
	go n.runEvery(SnapshotStreamTTL/2, func() { n.cleanSnapshots(false) })
	n.wg.Add(1)
	go n.runEvery(n.cfg.MembersRefreshInterval, n.refreshMembers)
	n.wg.Add(1)
	go n.runEvery(hierManageInterval, n.hierManage) // hierarchy.go
	if n.cfg.ScrubInterval > 0 {
		n.wg.Add(1)
		go n.runEvery(n.cfg.ScrubInterval, n.scrub) // scrub.go
	}
	if !n.bootstrapped() && len(n.cfg.Join) > 0 {
		n.wg.Add(1)
		go n.joinRunning() // membership.go
	} else if n.bootstrapped() {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.refreshMembers() }()
	}
	if n.bootstrapped() {
		// A store of another cluster on one of this cluster's addresses
		// is refused by the others; identity.go.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			ctx, cancel := context.WithTimeout(n.stopCtx, PeerIdentityCheckMax)
			defer cancel()
			n.checkPeersIdentity(ctx)
		}()
	}
	if n.bootstrapped() {
		n.startProtocol() // protocol.go
	}
	if err := n.startOps(); err != nil { // http.go
		n.Stop()
		return nil, err
	}
	return n, nil
}

// electionTimeout is Raft's election timeout on this node: within about it
// a range whose leader stopped elects another (Config's defaults are set).
func (n *Node) electionTimeout() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

// leaseDuration is how long a leader's lease lasts (replica.Config).
func (n *Node) leaseDuration() time.Duration {
	c := replica.Config{ElectionTicks: n.cfg.ElectionTicks, TickInterval: n.cfg.TickInterval}
	c.EnsureDefaults()
	return c.LeaseDuration()
}

// Addr returns the address the node serves on.
func (n *Node) Addr() string { return n.cfg.AdvertiseAddr }

// NodeID returns the node's ID (0 before bootstrap).
func (n *Node) NodeID() uint64 {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.nodeID
}

// Engine exposes the node's engine (tests, debug).
func (n *Node) Engine() *storage.Engine { return n.eng }

// RaftSchedulerMetrics returns the counters of the node's Raft scheduler.
func (n *Node) RaftSchedulerMetrics() replica.SchedulerMetrics { return n.sched.Metrics() }

// RaftMessagesSent returns the Raft messages this node has handed to its
// peers' streams so far (benches: messages per operation).
func (n *Node) RaftMessagesSent() uint64 { return n.transport.messagesSent.Load() }

// SetLinkFault injects a fault on the Raft link from this node to nodeID.
func (n *Node) SetLinkFault(nodeID uint64, f LinkFault) { n.transport.SetLinkFault(nodeID, f) }

// Stop stops serving, stops every replica and closes the store.
func (n *Node) Stop() {
	select {
	case <-n.stopc:
		return
	default:
	}
	close(n.stopc)
	n.stopCancel()
	n.stopProtocol() // protocol.go
	n.stopOps()      // http.go: before the store closes
	if n.etcd != nil {
		n.etcd.Close() // etcd.go: its client talks to this node
	}
	n.srv.Stop()
	n.transport.stop()
	n.mu.Lock()
	reps := make([]*rangeReplica, 0, len(n.mu.replicas))
	for _, rr := range n.mu.replicas {
		reps = append(reps, rr)
	}
	conns := n.mu.conns
	n.mu.conns = map[string]*grpc.ClientConn{}
	n.mu.Unlock()
	for _, rr := range reps {
		rr.r.Stop()
	}
	for _, c := range conns {
		_ = c.Close()
	}
	n.handlersMu.Lock()
	n.handlersStopped = true
	n.handlersMu.Unlock()
	n.handlers.Wait()
	n.wg.Wait()
	// After wg (no runtime is started any more), before the store closes.
	n.stopHierarchy()
	// After the handlers: one may have created a replica meanwhile.
	for _, rr := range n.replicaList() {
		rr.r.Stop()
		rr.sm.keys.forget() // give its entries back (keystates.go)
	}
	n.sched.Close()
	n.unregisterOps()
	n.outSnaps.expire(time.Time{})
	_ = n.eng.Close()
}

// ident is the node-local record of a bootstrapped node.
func (n *Node) loadIdent() error {
	v, err := n.eng.Get(nodeIdentKey)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var j rpcpb.JoinRequest
	if err := proto.Unmarshal(v, &j); err != nil {
		return fmt.Errorf("kvserver: node identity: %v: %w", err, storage.ErrCorruption)
	}
	n.setIdent(&j)
	return nil
}

func (n *Node) setIdent(j *rpcpb.JoinRequest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.nodeID = j.NodeId
	if n.mu.settings.GetCommitProtocol() != j.Settings.GetCommitProtocol() || n.mu.protocol == nil {
		n.mu.protocol = newServerProtocol(j.Settings)
	}
	n.mu.settings = j.Settings
	for _, nd := range j.Nodes {
		n.mu.nodes[nd.NodeId] = nd.Address
	}
	// Our own address may have changed across restarts (port 0 in tests).
	n.mu.nodes[j.NodeId] = n.cfg.AdvertiseAddr
}

func (n *Node) bootstrapped() bool { return n.NodeID() != 0 }

func (n *Node) settings() *rpcpb.ClusterSettings {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.settings
}

func (n *Node) nodeAddress(id uint64) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.nodes[id]
}

func (n *Node) nodeList() []*rpcpb.NodeDescriptor {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]*rpcpb.NodeDescriptor, 0, len(n.mu.nodes))
	for id, a := range n.mu.nodes {
		out = append(out, &rpcpb.NodeDescriptor{NodeId: id, Address: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeId < out[j].NodeId })
	return out
}

func (n *Node) conn(addr string) (*grpc.ClientConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.mu.conns[addr]; c != nil {
		return c, nil
	}
	opts := append(n.identityDialOptions(), rpc.DialOptions()...)
	c, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(n.peerCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))...)
	if err != nil {
		return nil, err
	}
	n.mu.conns[addr] = c
	return c, nil
}

func (n *Node) internalClient(nodeID uint64) (rpcpb.InternalClient, error) {
	addr := n.nodeAddress(nodeID)
	if addr == "" {
		return nil, fmt.Errorf("kvserver: no address for node n%d", nodeID)
	}
	c, err := n.conn(addr)
	if err != nil {
		return nil, err
	}
	return rpcpb.NewInternalClient(c), nil
}

func (n *Node) kvClient(nodeID uint64) (rpcpb.KVClient, error) {
	addr := n.nodeAddress(nodeID)
	if addr == "" {
		return nil, fmt.Errorf("kvserver: no address for node n%d", nodeID)
	}
	c, err := n.conn(addr)
	if err != nil {
		return nil, err
	}
	return rpcpb.NewKVClient(c), nil
}

func (n *Node) replica(rangeID uint64) *rangeReplica {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.replicas[rangeID]
}

func (n *Node) replicaList() []*rangeReplica {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]*rangeReplica, 0, len(n.mu.replicas))
	for _, rr := range n.mu.replicas {
		out = append(out, rr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].r.RangeID() < out[j].r.RangeID() })
	return out
}

func (n *Node) loadRanges() error {
	it, err := n.eng.NewIter(registryKey(0), registryKey(^uint64(0)))
	if err != nil {
		return err
	}
	var ids []uint64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		ids = append(ids, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, id := range ids {
		d, err := loadDesc(n.eng, id)
		if err != nil {
			return err
		}
		rr, err := n.newReplica(id, d)
		if err != nil {
			return err
		}
		if d != nil && replicaOn(d, n.NodeID()) == nil {
			// Removed from the range; the node stopped before it removed
			// the replica's state.
			go n.removeReplica(rr, d, "not in its descriptor at start")
		}
	}
	return nil
}

// newReplica creates and starts the replica of rangeID (desc nil: an
// uninitialized replica waiting for a snapshot).
//
// A replica created for an incoming message may race with join or a split
// creating the same range: it reads the descriptor from the engine, where
// join and splits commit it before publishing the range, so it is never
// left without the descriptor it has on disk.
func (n *Node) newReplica(rangeID uint64, desc *rpcpb.RangeDescriptor) (*rangeReplica, error) {
	return n.newReplicaRefusingVotes(rangeID, desc, time.Time{})
}

// newReplicaRefusingVotes is newReplica for a replica that drops vote
// requests until refuseVotesUntil (replica.Config.RefuseVotesUntil).
func (n *Node) newReplicaRefusingVotes(rangeID uint64, desc *rpcpb.RangeDescriptor, refuseVotesUntil time.Time) (*rangeReplica, error) {
	return n.newReplicaPeer(rangeID, desc, 0, refuseVotesUntil)
}

// newReplicaPeer creates the replica with Raft peer ID peer; 0: this
// node's replica in the descriptor (given, or loaded from the engine), or
// the node ID (an uninitialized replica of the initial layout's kind).
func (n *Node) newReplicaPeer(rangeID uint64, desc *rpcpb.RangeDescriptor, peer uint64, refuseVotesUntil time.Time) (*rangeReplica, error) {
	// One creation at a time, and none of a range that has a replica: a
	// replica reads its Raft state from the engine (replica.New), and one
	// already running writes that state in more than one batch (its
	// HardState and its applied index), so a second reader could see them
	// disagree and Raft would panic ("applied(11) is out of range
	// [prevApplied(10), committed(10)]": join's replica of range 1 against
	// one just created for a message from a peer that joined first).
	n.createMu.Lock()
	defer n.createMu.Unlock()
	return n.newReplicaLocked(rangeID, desc, peer, refuseVotesUntil)
}

// newReplicaLocked is newReplicaPeer with createMu held.
//
// The descriptor (when not given) and the Raft state are read from one
// engine snapshot. A split that applies meanwhile writes both for its
// right hand side in one batch; read from the live engine, a replica
// created for a peer's message could load no descriptor (before that
// batch) and the split's Raft state (after it): a replica that takes
// part in Raft with no state machine, refusing every command its peers
// apply (I5 broken: TestReplicaCreatedAcrossSplit).
func (n *Node) newReplicaLocked(rangeID uint64, desc *rpcpb.RangeDescriptor, peer uint64, refuseVotesUntil time.Time) (*rangeReplica, error) {
	if old := n.replica(rangeID); old != nil {
		return old, nil
	}
	view := n.eng.NewSnapshot()
	defer view.Close()
	n.mu.RLock()
	if t := n.mu.refuseVotes[rangeID]; t.After(refuseVotesUntil) {
		refuseVotesUntil = t
	}
	n.mu.RUnlock()
	if desc == nil {
		var err error
		if desc, err = loadDesc(view, rangeID); err != nil {
			return nil, err
		}
		if h := testingHooks.descLoaded; h != nil {
			h(n, rangeID, desc)
		}
	}
	if peer == 0 {
		peer = n.NodeID()
		if me := replicaOn(desc, n.NodeID()); me != nil {
			peer = peerID(me)
		}
	}
	sm := &rangeSM{n: n, rangeID: rangeID}
	sm.setDesc(desc)
	r, err := replica.New(replica.Config{
		RangeID:          rangeID,
		PeerID:           peer,
		Engine:           n.eng,
		State:            view,
		SM:               sm,
		Transport:        n.transport,
		Scheduler:        n.sched,
		ElectionTicks:    n.cfg.ElectionTicks,
		TickInterval:     n.cfg.TickInterval,
		QuiesceIdleTicks: n.cfg.QuiesceIdleTicks,
		Logger:           n.log,
		PeerLive:         n.liveness.isLive,
		OnWake:           func() { n.markActive(rangeID) },
		RefuseVotesUntil: refuseVotesUntil,
	})
	if err != nil {
		return nil, err
	}
	rr := &rangeReplica{r: r, peer: peer, sm: sm, latches: concurrency.NewLatchManager()}
	rr.locks.table = concurrency.NewLockTable(concurrency.Config{Detector: n.detector})
	// No replica of rangeID appeared meanwhile: only this function adds
	// one, under createMu (startRange holds it too).
	n.mu.Lock()
	n.mu.replicas[rangeID] = rr
	n.mu.Unlock()
	n.markActive(rangeID)
	r.Start()
	return rr, nil
}

// startRange starts the replica of a range created here by a split. An
// uninitialized replica of it is replaced.
func (n *Node) startRange(d *rpcpb.RangeDescriptor) {
	// Under createMu from the look at the old replica to the new one's
	// registration: a replica created meanwhile for a peer's message
	// (receiveRaft) would otherwise be found by newReplicaPeer and kept,
	// whatever state it loaded.
	n.createMu.Lock()
	defer n.createMu.Unlock()
	n.mu.Lock()
	old := n.mu.replicas[d.RangeId]
	if old != nil && old.sm.Desc() != nil {
		n.mu.Unlock()
		return
	}
	delete(n.mu.replicas, d.RangeId)
	var refuseVotesUntil time.Time
	if old != nil {
		// The replica replaced may have acknowledged a leader's heartbeat
		// (counted towards its lease); the new one has forgotten it. The
		// refusal is recorded before the old replica goes, so that a
		// replica created meanwhile for an incoming message
		// (receiveRaft) refuses votes too.
		now := time.Now()
		refuseVotesUntil = now.Add(n.leaseDuration())
		for id, t := range n.mu.refuseVotes {
			if t.Before(now) {
				delete(n.mu.refuseVotes, id)
			}
		}
		n.mu.refuseVotes[d.RangeId] = refuseVotesUntil
	}
	n.mu.Unlock()
	if old != nil {
		// We may be on a scheduler worker, applying the split: Stop waits
		// only for the old replica's critical section, never for a round.
		old.r.Stop()
	}
	rr, err := n.newReplicaLocked(d.RangeId, d, 0, refuseVotesUntil)
	if err != nil {
		n.log.Error("starting range", "range", d.RangeId, "err", err)
		return
	}
	// The node the lease placement setting names campaigns, else the one
	// at the preferred position: under oracle, a range split off one the
	// oracle's host leads starts there instead of moving there later.
	first := n.placedLeader(d, n.mayLead(d))
	if first == 0 {
		first = preferredLeader(d)
	}
	if first == n.NodeID() {
		rr.r.Campaign()
	}
}

// preferredLeader spreads leaseholders over nodes by range ID: the voter
// at position range ID modulo the number of voters.
func preferredLeader(d *rpcpb.RangeDescriptor) uint64 {
	return preferredLeaderAmong(d, func(uint64) bool { return true })
}

// preferredLeaderAmong is preferredLeader over the voters on nodes ok
// accepts: from the preferred position on, the first one it accepts.
func preferredLeaderAmong(d *rpcpb.RangeDescriptor, ok func(nodeID uint64) bool) uint64 {
	vs := voters(d)
	if len(vs) == 0 {
		return 0
	}
	start := int(d.RangeId % uint64(len(vs)))
	for i := range vs {
		if id := vs[(start+i)%len(vs)]; ok(id) {
			return id
		}
	}
	return 0
}

func (n *Node) reportUnreachable(rangeID uint64, m *raftpb.Message) {
	rr := n.replica(rangeID)
	if rr == nil {
		return
	}
	rr.r.ReportUnreachable(m.To)
	if m.Type == raftpb.MsgSnap {
		rr.r.ReportSnapshotFailure(m.To)
	}
}

// receiveRaft steps an incoming message into its replica, creating an
// uninitialized replica for a range this node does not know yet.
func (n *Node) receiveRaft(rm *rpcpb.RaftMessage) error {
	if !n.bootstrapped() || rm.ToNodeId != n.NodeID() || n.failed() {
		return nil
	}
	if h := testingHooks.dropRaft; h != nil && h(n, rm.RangeId) {
		return nil
	}
	var m raftpb.Message
	if err := m.Unmarshal(rm.Message); err != nil {
		return nil
	}
	if n.disk.dropRaft(&m) { // diskspace.go: the disk is low
		if m.Type == raftpb.MsgSnap {
			return fmt.Errorf("kvserver: snapshot for r%d refused on n%d: out of disk", rm.RangeId, n.NodeID())
		}
		return nil
	}
	if (m.Type == raftpb.MsgVote || m.Type == raftpb.MsgPreVote) && time.Now().Before(n.votesFrom) {
		// This node may have acknowledged a leader's heartbeat just before
		// it stopped, and forgot it: a vote now could elect a new leader
		// while that leader's lease runs (see replica.leaderLease). The
		// candidate retries after its election timeout.
		return nil
	}
	if replica.NodeOf(m.To) != n.NodeID() {
		return nil
	}
	rr := n.replica(rm.RangeId)
	if rr != nil && rr.peer != m.To {
		if replica.ReplicaIDOf(m.To) < replica.ReplicaIDOf(rr.peer) {
			return nil // for a replica removed from here before this one came
		}
		// The range added a newer replica here: this one was removed (one
		// replica per node per range) and never learnt it.
		n.removeReplica(rr, nil, "a newer replica of the range was added on this node")
		if rr = n.replica(rm.RangeId); rr != nil {
			return nil // not removed (logged); Raft sends again
		}
	}
	if rr == nil {
		tomb, err := loadTombstone(n.eng, rm.RangeId)
		if err != nil {
			return err
		}
		if replica.ReplicaIDOf(m.To) < tomb {
			return nil // a late message for a removed replica
		}
	}
	if rm.Quiesce && rr != nil {
		if !n.checkHeartbeatCommit(rr, &m) {
			return nil
		}
		rr.r.StepQuiesce(m)
		return nil
	}
	if m.Type == raftpb.MsgSnap && (rr == nil || rr.sm.Desc() == nil) {
		if err := n.snapshotOverlaps(rm.RangeId, &m); err != nil {
			return err
		}
	}
	if rr == nil {
		var err error
		if rr, err = n.newReplicaPeer(rm.RangeId, nil, m.To, time.Time{}); err != nil {
			n.log.Error("creating replica", "range", rm.RangeId, "err", err)
			return err
		}
	}
	if !n.checkHeartbeatCommit(rr, &m) { // storecheck.go: Raft would panic
		return nil
	}
	rr.r.Step(m)
	return nil
}

// snapshotOverlaps returns an error if MsgSnap m, for a range of which
// this node has no initialized replica, overlaps another replica here.
//
// A snapshot may only initialize a replica if its span overlaps no other
// replica here: otherwise that replica has yet to apply the split that
// created this range, and would still write into it.
//
// The refusal must reach the sender: its Raft leader otherwise waits for
// this snapshot forever (a follower in StateSnapshot gets no appends until
// the snapshot is reported), and the replica that the split creates here
// later, at the split's initial index, would never catch up.
func (n *Node) snapshotOverlaps(rangeID uint64, m *raftpb.Message) error {
	st, _, err := snapshotState(m.Snapshot.Data)
	if err != nil {
		return fmt.Errorf("kvserver: snapshot for r%d: %w", rangeID, err)
	}
	d := st.Range
	for _, other := range n.replicaList() {
		od := other.sm.Desc()
		if other.r.RangeID() != rangeID && od != nil &&
			string(od.StartKey) < string(d.EndKey) && string(d.StartKey) < string(od.EndKey) {
			return fmt.Errorf("kvserver: snapshot for r%d refused on n%d: it overlaps r%d, which has yet to apply the split", rangeID, n.NodeID(), other.r.RangeID())
		}
	}
	return nil
}

// admitSnapshot returns why the MsgSnap m of rm is refused here before its
// data is received, or nil (receiveRaft checks it again when it steps it).
func (n *Node) admitSnapshot(rm *rpcpb.RaftMessage, m *raftpb.Message) error {
	if !n.bootstrapped() || rm.ToNodeId != n.NodeID() || n.failed() {
		return status.Errorf(codes.FailedPrecondition, "kvserver: snapshot for r%d: node n%d cannot take it", rm.RangeId, n.NodeID())
	}
	if n.disk != nil && n.disk.low.Load() {
		return status.Errorf(codes.ResourceExhausted, "kvserver: snapshot for r%d refused on n%d: out of disk", rm.RangeId, n.NodeID())
	}
	if rr := n.replica(rm.RangeId); rr == nil || rr.sm.Desc() == nil {
		if err := n.snapshotOverlaps(rm.RangeId, m); err != nil {
			return status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	return nil
}

// runEvery calls fn every interval until the node stops.
func (n *Node) runEvery(interval time.Duration, fn func()) {
	defer n.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.stopc:
			return
		case <-t.C:
		}
		fn()
	}
}

// LivenessBeatTicks: the liveness beat goes to each peer every this many
// ticks (an empty batch, only if nothing else went to the peer since the
// last beat). A peer is not live after ElectionTicks (10) ticks without a
// batch, so a beat may come up to 7 ticks late before a live peer is taken
// for dead. Sent every tick, it took about a quarter of an idle node's
// CPU samples at 10,000 ranges (gRPC stream writes and frame reads, per
// pair of nodes: docs/BENCHMARKS.md, "Idle ranges").
const LivenessBeatTicks = 3

// tick advances the Raft clock of every replica that is not quiescent,
// sends the liveness beat to every peer (every LivenessBeatTicks), and wakes the quiescent replicas
// that depend on a peer that is not live: those whose leader is there,
// and leaders with a follower there (so that a leader cut off from its
// followers steps down by CheckQuorum while they elect another).
//
// A quiescent replica costs one atomic load here and nothing else: it is
// not queued with the scheduler.
func (n *Node) tick() {
	self := n.NodeID()
	n.liveness.tick()
	var peers []uint64
	for _, nd := range n.nodeList() {
		if nd.NodeId != self && !n.removedPeer(nd.NodeId) {
			peers = append(peers, nd.NodeId)
		}
	}
	if self != 0 && n.ticks%LivenessBeatTicks == 0 {
		n.transport.beat(self, peers)
	}
	n.ticks++
	dead := n.liveness.dead(peers)
	var revived map[uint64]bool
	for id := range n.lastDead {
		if !dead[id] {
			if revived == nil {
				revived = map[uint64]bool{}
			}
			revived[id] = true
		}
	}
	n.lastDead = dead
	var reps []*rangeReplica
	if dead != nil || revived != nil {
		// A peer went silent: every quiescent replica that depends on it
		// must wake (Unquiesce puts it back in the active set). A peer
		// is live again: the quiescent leaders with a follower there
		// wake, to catch it up (they quiesced without it).
		n.mu.RLock()
		for _, rr := range n.mu.replicas {
			if !rr.r.Quiescent() || (dead != nil && n.dependsOn(rr, self, dead)) ||
				(revived != nil && n.leadsFollowerOn(rr, self, revived)) {
				reps = append(reps, rr)
			}
		}
		n.mu.RUnlock()
	} else {
		n.activeMu.Lock()
		n.mu.RLock()
		for id := range n.active {
			// Dropped only if quiescent when looked at under activeMu: a
			// replica that wakes later adds itself back (markActive takes
			// activeMu after the replica cleared its quiescent flag).
			rr := n.mu.replicas[id]
			if rr == nil || rr.r.Quiescent() {
				delete(n.active, id)
				continue
			}
			reps = append(reps, rr)
		}
		n.mu.RUnlock()
		n.activeMu.Unlock()
	}
	for _, rr := range reps {
		rr.r.Unquiesce()
		rr.r.Tick()
	}
	n.checkOracleLeadership()
}

// markActive puts rangeID in tick's working set and in the next balance
// round. Called with the replica's lock held (replica.Config.OnWake): it
// takes only activeMu.
func (n *Node) markActive(rangeID uint64) {
	n.activeMu.Lock()
	n.active[rangeID] = struct{}{}
	n.balanceDue[rangeID] = struct{}{}
	n.activeMu.Unlock()
}

// dependsOn reports whether rr's leader, or, if rr leads, one of its
// followers, is on a node in dead.
func (n *Node) dependsOn(rr *rangeReplica, self uint64, dead map[uint64]bool) bool {
	st := rr.r.Status()
	if !st.IsLeader {
		return st.Leader == 0 || dead[st.Leader]
	}
	// A leader depends on the dead only if they take its quorum (this node
	// may be the one cut off, and must step down by CheckQuorum); a dead
	// minority lets it quiesce without them (replica.maybeQuiesceLeader).
	if d := rr.sm.Desc(); d != nil {
		live := 0
		for _, rd := range d.Replicas {
			if rd.NodeId == self || !dead[rd.NodeId] {
				live++
			}
		}
		return live < len(d.Replicas)/2+1
	}
	return false
}

// leadsFollowerOn reports whether rr leads with a follower on a node in
// ids.
func (n *Node) leadsFollowerOn(rr *rangeReplica, self uint64, ids map[uint64]bool) bool {
	if !rr.r.Status().IsLeader {
		return false
	}
	if d := rr.sm.Desc(); d != nil {
		for _, rd := range d.Replicas {
			if rd.NodeId != self && ids[rd.NodeId] {
				return true
			}
		}
	}
	return false
}

// BalanceSweepEvery: every this many balance rounds looks at every
// replica; the rounds between look only at the ranges that were active
// since the round before (a quiescent range's leadership and descriptor do
// not change, so only a transfer refused earlier can be missed until the
// next sweep). A var for tests.
var BalanceSweepEvery = 30

// balance moves leadership to each range's preferred node once that node
// has caught up, and keeps meta records true.
func (n *Node) balance() {
	// The ranges that woke since the last round, and those still awake
	// (a busy range wakes once and stays active).
	moved := n.noteOracleMove() // placement.go
	n.activeMu.Lock()
	due := n.balanceDue
	n.balanceDue = map[uint64]struct{}{}
	for id := range n.active {
		due[id] = struct{}{}
	}
	n.balanceRun++
	sweep := n.balanceRun%BalanceSweepEvery == 1 || moved
	n.activeMu.Unlock()
	// A node low on disk refuses writes (diskspace.go): it hands the
	// leadership of every range it leads to a caught-up follower, which
	// can take them, and looks at every range while low.
	lowDisk := n.disk != nil && n.disk.low.Load()
	var reps []*rangeReplica
	if sweep || lowDisk {
		reps = n.replicaList()
	} else {
		n.mu.RLock()
		for id := range due {
			if rr := n.mu.replicas[id]; rr != nil {
				reps = append(reps, rr)
			}
		}
		n.mu.RUnlock()
	}
	splitDone := false
	defer func() {
		if !lowDisk {
			n.replicateRound(reps) // replicate.go
		}
	}()
	quiescentChecks := 0
	for _, rr := range reps {
		st := rr.r.Status()
		d := rr.sm.Desc()
		switch {
		case d == nil || st.IsLeader:
		case st.Leader == 0:
			n.maybeGCReplica(rr, d, ReplicaGCCheckInterval, false) // replicate.go
		case sweep && st.Quiescent && quiescentChecks < ReplicaGCQuiescentMax:
			switch asked, answered := n.maybeGCReplica(rr, d, ReplicaGCQuiescentInterval, true); {
			case asked && !answered:
				quiescentChecks = ReplicaGCQuiescentMax // range 1 did not answer: next sweep
			case asked:
				quiescentChecks++
			}
		}
		if !st.IsLeader || d == nil {
			continue
		}
		if lowDisk {
			if len(st.CaughtUp) > 0 {
				rr.r.TransferLeader(st.CaughtUp[0])
			}
			continue
		}
		if p := n.preferredLeaderOf(d); p != n.NodeID() {
			for _, id := range st.CaughtUp {
				if id == p {
					rr.r.TransferLeader(p)
				}
			}
		}
		if !splitDone && st.Leaseholder {
			// At most one split by size (autosplit.go) or load
			// (loadsplit.go) per round.
			ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
			splitDone = n.maybeSplitBySize(ctx, rr) || n.maybeSplitByLoad(ctx, rr)
			cancel()
			if splitDone {
				continue
			}
		}
		if gen, ok := n.metaChecked[d.RangeId]; (ok && gen == d.Generation) || d.Generation == 0 {
			// Generation 0: a range of the initial layout, whose meta
			// record Bootstrap wrote into range 1's initial state (a split
			// gives both sides generation 1 or more).
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
		if err := n.ensureMeta(ctx, d); err != nil {
			n.log.Debug("meta record check", "range", d.RangeId, "err", err)
		} else {
			n.metaChecked[d.RangeId] = d.Generation
		}
		cancel()
	}
}

// grpcStreamWorkers is the number of goroutines of a node's gRPC server
// that run handlers and keep their grown stacks between RPCs
// (grpc.NumStreamWorkers). 128 covers the RPCs in flight of a node under a
// few hundred clients; an idle worker costs one parked goroutine.
const grpcStreamWorkers = 128
