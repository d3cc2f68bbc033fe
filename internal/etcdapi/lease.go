package etcdapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"

	"github.com/canopy-db/canopy/client"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// LeaseGraceMs is how long past its expiry a lease is still honoured: the
// oracle's clock, by which leases expire, may run ahead of the wall clock
// by up to tso's default BoundAhead (3 s) after the oracle's host changes
// (however many; each change less than about 190 ms after the last may add
// up to that much, and clocks that disagree add their difference).
// A lease therefore ends between its TTL and its TTL + 3 s after the last
// keep-alive, never before (docs/ETCD-API.md).
const LeaseGraceMs = 3000

// expired says whether the lease has ended at the oracle's nowMs.
func (r leaseRecord) expired(nowMs int64) bool { return r.expiryMs+LeaseGraceMs <= nowMs }

// leaseServer is etcd's Lease service. A lease is a record in the etcd
// keyspace (keys.go) holding its granted TTL and its expiry in the
// oracle's milliseconds: the physical part of Canopy timestamps, one
// clock for the whole cluster. A keep-alive is a transaction that moves
// the expiry to now + TTL. Every node's expirer (Server.Start) revokes
// the leases past their expiry; a revocation deletes the lease's keys and
// the record in one transaction (in several for more than RevokeChunkKeys
// keys). A lease past its expiry that no expirer has revoked yet is
// already dead to every request: a put with it fails, a keep-alive
// returns TTL 0, TimeToLive returns -1.
type leaseServer struct{ s *Server }

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if r.TTL > LeaseTTLMaxSeconds {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	ttl := max(r.TTL, LeaseTTLMinSeconds)
	if r.ID < 0 {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	var id int64
	rev, err := l.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		id = r.ID
		for attempt := 0; ; attempt++ {
			if r.ID == 0 {
				id = rand.Int64N(1<<63-1) + 1
			}
			_, ok, err := x.bufGet(ctx, leaseKey(id))
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if r.ID != 0 || attempt > 8 {
				return rpctypes.ErrGRPCLeaseExist
			}
		}
		x.writes++
		return x.bufPut(ctx, leaseKey(id), encodeLease(leaseRecord{ttlSeconds: ttl, expiryMs: physicalMs(x.txn.StartTs()) + ttl*1000}))
	})
	if err != nil {
		return nil, err
	}
	return &pb.LeaseGrantResponse{Header: l.s.header(rev), ID: id, TTL: ttl}, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	rev, found, err := l.s.revoke(ctx, r.ID, false)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	return &pb.LeaseRevokeResponse{Header: l.s.header(rev)}, nil
}

// revoke deletes lease id's keys and record; onlyExpired: only if it has
// expired (the expirer). It returns whether the lease was there (and, if
// onlyExpired, expired).
func (s *Server) revoke(ctx context.Context, id int64, onlyExpired bool) (rev int64, found bool, err error) {
	for {
		done := false
		rev, err = s.run(ctx, func(ctx context.Context, x *txnExec) error {
			done, found = false, false
			rec, live, err := x.leaseLive(ctx, id)
			if err != nil {
				return err
			}
			if rec == (leaseRecord{}) || (onlyExpired && live) {
				done = true
				return nil
			}
			found = true
			idx, err := x.bufScan(ctx, indexPrefixOf(id), prefixEnd(indexPrefixOf(id)), RevokeChunkKeys+1)
			if err != nil {
				return err
			}
			chunk := idx
			if len(idx) > RevokeChunkKeys {
				chunk = idx[:RevokeChunkKeys]
			}
			for _, c := range chunk {
				k := c.Key[len(indexPrefixOf(id)):]
				kv, err := x.get(ctx, k)
				if err != nil {
					return err
				}
				if kv != nil && kv.Lease == id {
					if err := x.bufDelete(ctx, dataKey(k)); err != nil {
						return err
					}
				}
				if err := x.bufDelete(ctx, c.Key); err != nil {
					return err
				}
				x.writes++
			}
			if len(idx) <= RevokeChunkKeys {
				done = true
				x.writes++
				return x.bufDelete(ctx, leaseKey(id))
			}
			return nil
		})
		if err != nil || done {
			return rev, found, err
		}
	}
}

func prefixEnd(p []byte) []byte {
	return client.PrefixSpan(p).End
}

func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var ttl int64
		rev, err := l.s.run(ctx, func(ctx context.Context, x *txnExec) error {
			ttl = 0
			rec, live, err := x.leaseLive(ctx, req.ID)
			if err != nil || !live {
				return err
			}
			ttl = rec.ttlSeconds
			rec.expiryMs = physicalMs(x.txn.StartTs()) + rec.ttlSeconds*1000
			x.writes++
			return x.bufPut(ctx, leaseKey(req.ID), encodeLease(rec))
		})
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: l.s.header(rev), ID: req.ID, TTL: ttl}); err != nil {
			return err
		}
	}
}

func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp := &pb.LeaseTimeToLiveResponse{ID: r.ID, TTL: -1}
	rev, err := l.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		resp.TTL, resp.GrantedTTL, resp.Keys = -1, 0, nil
		rec, live, err := x.leaseLive(ctx, r.ID)
		if err != nil || !live {
			return err
		}
		resp.GrantedTTL = rec.ttlSeconds
		resp.TTL = max(rec.expiryMs-physicalMs(x.txn.StartTs()), 0) / 1000
		if !r.Keys {
			return nil
		}
		p := indexPrefixOf(r.ID)
		start := p
		for {
			idx, err := x.bufScan(ctx, start, prefixEnd(p), scanPageKeys)
			if err != nil {
				return err
			}
			for _, c := range idx {
				resp.Keys = append(resp.Keys, bytes.Clone(c.Key[len(p):]))
			}
			if len(idx) < scanPageKeys {
				return nil
			}
			if len(resp.Keys) > x.s.opts.RangeKeysMax {
				return errTooManyKeys(x.s.opts.RangeKeysMax)
			}
			start = append(bytes.Clone(idx[len(idx)-1].Key), 0)
		}
	})
	if err != nil {
		return nil, err
	}
	resp.Header = l.s.header(rev)
	return resp, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	var out []*pb.LeaseStatus
	rev, err := l.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		out = out[:0]
		var err error
		out, err = x.leases(ctx, func(id int64, rec leaseRecord) bool {
			return !rec.expired(physicalMs(x.txn.StartTs()))
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &pb.LeaseLeasesResponse{Header: l.s.header(rev), Leases: out}, nil
}

// leases lists the leases that keep says to.
func (x *txnExec) leases(ctx context.Context, keep func(id int64, rec leaseRecord) bool) ([]*pb.LeaseStatus, error) {
	var out []*pb.LeaseStatus
	start := leasePrefix
	for {
		kvs, err := x.bufScan(ctx, start, prefixEnd(leasePrefix), scanPageKeys)
		if err != nil {
			return nil, err
		}
		for _, c := range kvs {
			if len(c.Key) != len(leasePrefix)+8 {
				return nil, errCorrupt
			}
			rec, err := decodeLease(c.Value)
			if err != nil {
				return nil, err
			}
			id := int64(binary.BigEndian.Uint64(c.Key[len(leasePrefix):]))
			if keep(id, rec) {
				out = append(out, &pb.LeaseStatus{ID: id})
			}
		}
		if len(kvs) < scanPageKeys {
			return out, nil
		}
		if len(out) > x.s.opts.RangeKeysMax {
			return nil, errTooManyKeys(x.s.opts.RangeKeysMax)
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// expireLeases revokes the leases past their expiry (Start's loop).
func (s *Server) expireLeases() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.mu.Lock()
	serving, checked := s.mu.serving, s.mu.checked
	s.mu.Unlock()
	if !serving && (checked || s.opts.NodeID() == 0) {
		// Nobody uses the etcd API here, and when the node started
		// (once the cluster was initialized) there were no leases.
		return
	}
	var expired []*pb.LeaseStatus
	found := false
	_, err := s.run(ctx, func(ctx context.Context, x *txnExec) error {
		var err error
		found = false
		expired, err = x.leases(ctx, func(id int64, rec leaseRecord) bool {
			found = true
			return rec.expired(physicalMs(x.txn.StartTs()))
		})
		return err
	})
	if err != nil {
		s.log.Debug("looking for expired leases", "err", err)
		return
	}
	if !serving {
		// The check at start: leases outlive a restart of the whole
		// cluster, so their expiry must not wait for an etcd client.
		s.mu.Lock()
		s.mu.checked = true
		s.mu.serving = s.mu.serving || found
		s.mu.Unlock()
	}
	for _, l := range expired {
		if _, found, err := s.revoke(ctx, l.ID, true); err != nil {
			s.log.Debug("revoking an expired lease", "lease", l.ID, "err", err)
		} else if found {
			s.log.Debug("revoked an expired lease", "lease", l.ID)
		}
	}
}
