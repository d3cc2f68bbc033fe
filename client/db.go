package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// DB is a handle on a Canopy cluster. It is safe for concurrent use; open
// one per process and share it.
type DB struct {
	opts     Options
	nodes    *nodeDirectory
	cache    *rangeCache
	sender   *sender
	oracle   *oracle
	enc      txnstatus.Encoding
	settings *rpcpb.ClusterSettings
	resolver *intentResolver
	// statuses caches decided transactions' statuses.
	statuses *statusCache
	// statusWrites coalesces put-unless-exists cells per range.
	statusWrites *statusWrites
	stats        stats
	// switches is the cluster's transaction switches (settings.go).
	switches clusterSwitches
	// hierCommitted is the highest commit timestamp of this client's
	// hierarchy transactions (txn_hierarchy.go): a later transaction of
	// this client begins above it, so that it reads its own writes.
	hierCommitted atomic.Uint64
	// schedule is the status encoding schedule (status_schedule.go).
	schedule statusSchedule

	// ctx is the background context of the DB's goroutines (oracle RPCs,
	// heartbeats, intent resolution); Close cancels it.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// Open connects to the cluster reachable at any of addresses. It asks a
// node for the cluster's settings (the status-table encoding) and its
// nodes, and fails with ErrUnavailable if none answers before ctx ends or
// the attempts run out (also when the cluster is not bootstrapped yet).
func Open(ctx context.Context, addresses []string, opts ...Option) (*DB, error) {
	if len(addresses) == 0 {
		return nil, invalidArgf("Open needs at least one address")
	}
	var o Options
	for _, f := range opts {
		f(&o)
	}
	set := o // before the defaults: what the caller left to the client (timing.go)
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	db := &DB{opts: o, ctx: bg, cancel: cancel}
	db.nodes = newNodeDirectory(addresses, o.TLS, o.DialOptions)
	db.cache = newRangeCache()
	db.sender = &sender{opts: &db.opts, nodes: db.nodes, cache: db.cache, ctx: db.ctx, timing: newTiming(&set, &db.opts)}
	db.oracle = newOracle(bg, db.sender, &db.opts)
	info, err := db.firstContact(ctx, addresses)
	if err != nil {
		db.Close()
		return nil, err
	}
	db.settings = info.GetSettings()
	db.sender.timing.adopt(time.Duration(info.GetElectionTimeoutMs())*time.Millisecond, db.opts.SendBackoffInitial)
	db.nodes.setClusterID(db.settings.GetClusterId())
	db.enc = o.StatusEncoding
	if db.enc == nil {
		if db.enc, err = statusEncodingFor(db.settings); err != nil {
			db.Close()
			return nil, err
		}
	}
	db.initSchedule()
	db.resolver = newIntentResolver(db)
	db.statuses = newStatusCache(db.opts.StatusCacheEntriesMax)
	db.statusWrites = newStatusWrites(db)
	// The switches only tune: a cluster that cannot be read now is read
	// again at the next refresh.
	// Bounded: with range 1 unavailable, Open must not wait out every
	// routing attempt for a setting that is read again later anyway.
	sctx, scancel := context.WithTimeout(ctx, db.opts.LookupTimeout)
	err = db.refreshSwitches(sctx)
	scancel()
	if err != nil {
		db.opts.Logger.Debug("canopy client: reading the cluster's transaction switches failed", "err", err)
	}
	go db.watchSwitches()
	return db, nil
}

// statusEncodingFor returns the status-table encoding the cluster's
// settings name.
func statusEncodingFor(s *rpcpb.ClusterSettings) (txnstatus.Encoding, error) {
	name := s.GetStatusEncoding()
	switch name {
	case "":
		name = "tickets" // bootstrapped before encodings were recorded
	case "v1", "tickets", "tickets-mix":
	default:
		return nil, fmt.Errorf("%w: cluster uses status encoding %q, unknown to this client", ErrInternal, name)
	}
	return txnstatus.Named(name, s.GetTicketsPartitioningQuantum(), s.GetTicketsRowsPerQuantum())
}

// Close stops the DB's goroutines and closes its connections. Queued
// intent resolution gets up to Options.CloseDrainMax to finish; intents it
// leaves are resolved by the readers that meet them. Transactions still
// open stop heartbeating and will be aborted by others.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		if db.resolver != nil {
			db.resolver.close(db.opts.CloseDrainMax)
		}
		db.cancel()
		db.closeErr = db.nodes.close()
	})
	return db.closeErr
}

// Settings returns the cluster settings read at Open.
func (db *DB) Settings() *rpcpb.ClusterSettings { return db.settings }

// firstContact is Open's ClusterInfo. With Options.DialTimeout, every
// seed address is asked at once, each retried until the dial timeout, and
// the first answer wins: a stopped node among the seeds costs nothing (as
// etcdctl's per-endpoint dial timeout), and nothing answering ends in
// ErrUnavailable "cannot reach any node" after the dial timeout.
func (db *DB) firstContact(ctx context.Context, addresses []string) (*rpcpb.ClusterInfoResponse, error) {
	if db.opts.DialTimeout <= 0 {
		return db.ClusterInfo(ctx)
	}
	dctx, cancel := context.WithTimeout(ctx, db.opts.DialTimeout)
	defer cancel()
	type answer struct {
		info *rpcpb.ClusterInfoResponse
		err  error
	}
	answers := make(chan answer, len(addresses))
	for _, addr := range addresses {
		go func(addr string) {
			bo := newBackoff(db.opts.SendBackoffInitial, db.opts.SendBackoffMax)
			var last error
			for {
				info, err := db.clusterInfoAt(dctx, addr)
				if err == nil {
					answers <- answer{info: info}
					return
				}
				if refused(err) {
					answers <- answer{err: err}
					return
				}
				if last == nil || dctx.Err() == nil {
					// An attempt the dial timeout cut short says less
					// than the error before it (connection refused...).
					last = err
				}
				if sleepCtx(dctx, bo.next()) != nil {
					answers <- answer{err: last}
					return
				}
			}
		}(addr)
	}
	var errs []string
	for range addresses {
		a := <-answers
		if a.err == nil {
			cancel() // the other seeds stop
			db.nodes.update(a.info.GetNodes())
			return a.info, nil
		}
		if refused(a.err) {
			return nil, unstop(a.err) // the cluster answered: no
		}
		errs = append(errs, a.err.Error())
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: cluster info: %w", ErrUnavailable, err)
	}
	return nil, fmt.Errorf("%w: cannot reach any node of %s (dial timeout %v): %s",
		ErrUnavailable, strings.Join(addresses, ","), db.opts.DialTimeout, strings.Join(errs, "; "))
}

// clusterInfoAt asks the node at addr for ClusterInfo, once.
func (db *DB) clusterInfoAt(ctx context.Context, addr string) (*rpcpb.ClusterInfoResponse, error) {
	kv, err := db.nodes.client(addr)
	if err != nil {
		return nil, err
	}
	resp, err := kv.ClusterInfo(ctx, &rpcpb.ClusterInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
		return nil, fmt.Errorf("%s: %s: %s", addr, pe.GetCode(), pe.GetMessage())
	}
	return resp, nil
}

// ClusterInfo asks any node for the cluster's settings and nodes, and
// refreshes the client's node directory from the answer.
func (db *DB) ClusterInfo(ctx context.Context) (*rpcpb.ClusterInfoResponse, error) {
	var out *rpcpb.ClusterInfoResponse
	err := db.sender.anyNode(ctx, "cluster info", func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error) {
		resp, err := kv.ClusterInfo(ctx, &rpcpb.ClusterInfoRequest{})
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		out = resp
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	db.nodes.update(out.GetNodes())
	return out, nil
}

// NodeStatus asks the node at address for its status (ranges, Raft
// state). It does not retry elsewhere: the caller asked about that node.
func (db *DB) NodeStatus(ctx context.Context, address string) (*rpcpb.NodeStatusResponse, error) {
	kv, err := db.nodes.client(address)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, db.opts.RPCTimeout)
	defer cancel()
	resp, err := kv.NodeStatus(ctx, &rpcpb.NodeStatusRequest{})
	if refused(err) {
		return nil, unstop(err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: node status of %s: %w", ErrUnavailable, address, err)
	}
	return resp, nil
}

// Split splits the range containing the user key userKey at it, so that
// userKey starts a new range. The request goes to the range's leaseholder.
func (db *DB) Split(ctx context.Context, userKey []byte) error {
	if err := checkKey(userKey); err != nil {
		return err
	}
	k := keys.UserKey(userKey)
	_, err := db.sender.route(ctx, k, true, func(ctx context.Context, kv rpcpb.KVClient, _ *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
		resp, err := kv.Split(ctx, &rpcpb.SplitRequest{SplitKey: k})
		if err != nil {
			return nil, err
		}
		return resp.GetError(), nil
	})
	db.cache.evictKey(k)
	return publicError(err)
}

// Ranges lists the ranges of the keyspace in key order, with the
// leaseholder each lookup reported (0 if unknown), by walking the meta
// range with RangeLookup. It bypasses the cache's descriptors, so it sees
// splits made by others.
func (db *DB) Ranges(ctx context.Context) ([]RangeInfo, error) {
	var out []RangeInfo
	key := keys.MinKey
	for {
		var info RangeInfo
		err := db.sender.anyNode(ctx, fmt.Sprintf("range lookup of %q", key), func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error) {
			resp, err := kv.RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: key})
			if err != nil {
				return nil, err
			}
			if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
				return pe, nil
			}
			if resp.GetRange() == nil {
				return nil, &stopError{fmt.Errorf("%w: range lookup of %q returned no range", ErrInternal, key)}
			}
			db.nodes.update(resp.GetNodes())
			info = RangeInfo{Desc: resp.GetRange(), LeaseholderNodeID: resp.GetLeaseholderNodeId()}
			return nil, nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, info)
		end := info.Desc.GetEndKey()
		if len(end) == 0 || string(end) >= string(keys.MaxKey) {
			return out, nil
		}
		if string(end) <= string(key) {
			return nil, fmt.Errorf("%w: range lookup of %q returned %v, which does not advance", ErrInternal, key, info.Desc)
		}
		if len(out) > rangesListMax {
			return nil, fmt.Errorf("%w: more than %d ranges (rangesListMax)", ErrInvalidArgument, rangesListMax)
		}
		key = end
	}
}

// rangesListMax bounds DB.Ranges.
const rangesListMax = 100_000

// RangeInfo describes one range as DB.Ranges found it.
type RangeInfo struct {
	Desc              *rpcpb.RangeDescriptor
	LeaseholderNodeID uint64
}

// Timestamp returns a fresh timestamp from the cluster's oracle: greater
// than every timestamp handed out before the call.
func (db *DB) Timestamp(ctx context.Context) (uint64, error) {
	return db.oracle.timestamp(ctx)
}

// checkKey enforces keys.KeyBytesMax on a user key.
func checkKey(k []byte) error {
	if len(k) > keys.KeyBytesMax {
		return invalidArgf("key is %d bytes, above the limit KeyBytesMax=%d", len(k), keys.KeyBytesMax)
	}
	return nil
}

// checkValue enforces keys.ValueBytesMax.
func checkValue(v []byte) error {
	if len(v) > keys.ValueBytesMax {
		return invalidArgf("value is %d bytes, above the limit ValueBytesMax=%d", len(v), keys.ValueBytesMax)
	}
	return nil
}

// checkScan validates a user scan and returns its logical bounds.
func (db *DB) checkScan(start, end []byte, limit int) ([]byte, []byte, error) {
	if err := checkKey(start); err != nil {
		return nil, nil, err
	}
	if err := checkKey(end); err != nil {
		return nil, nil, err
	}
	if limit < 0 {
		return nil, nil, invalidArgf("scan limit is negative (%d)", limit)
	}
	if limit > db.opts.ScanKeysMax {
		return nil, nil, invalidArgf("scan limit %d is above the limit ScanKeysMax=%d", limit, db.opts.ScanKeysMax)
	}
	ls, le := keys.UserKey(start), keys.UserSpanEnd(end)
	if string(ls) > string(le) {
		return nil, nil, invalidArgf("scan start %q is after its end %q", start, end)
	}
	return ls, le, nil
}

// KeyValue is a key and its value as read.
type KeyValue struct {
	Key   []byte
	Value []byte
	// Ts is the commit timestamp of the version read (0 for a transaction's
	// own uncommitted write).
	Ts uint64
}

// userKVs strips the user prefix from scan results.
func userKVs(kvs []*rpcpb.KeyValue) ([]KeyValue, error) {
	out := make([]KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		k, err := keys.StripUser(kv.GetKey())
		if err != nil {
			return nil, fmt.Errorf("%w: scan returned a non-user key: %w", ErrInternal, err)
		}
		out = append(out, KeyValue{Key: k, Value: kv.GetValue(), Ts: kv.GetTs()})
	}
	return out, nil
}

// countAmbiguous counts an ErrAmbiguous on its way to the caller.
func (db *DB) countAmbiguous(err error) error {
	if errors.Is(err, ErrAmbiguous) {
		db.stats.ambiguous.add(1)
	}
	return err
}
