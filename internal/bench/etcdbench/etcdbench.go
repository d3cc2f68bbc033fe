// Package etcdbench lets the Canopy benchmarks drive an etcd cluster
// through etcd's Go client (go.etcd.io/etcd/client/v3), so that `canopy
// bench kv` and `canopy bench txn` measure etcd with the same workloads,
// keys, values, bounds and output as Canopy.
//
// The calls, and what they cost etcd:
//
//   - Put: one Put RPC (a Raft proposal, committed and applied).
//   - Get: one Range RPC, linearizable (the default, not WithSerializable):
//     the serving member confirms with the leader (ReadIndex) first.
//   - Transfer (txnbench.Store): two linearizable Gets, one after the
//     other, then one Txn RPC: If both keys' ModRevision is still what
//     the Gets saw, Then put both new values. A Txn whose compare fails
//     (another transfer wrote one of the keys in between) is run again
//     from the Gets, at once and at most AttemptsMax times: each run
//     after the first is a retry. Reading the two keys with one
//     read-only Txn would save one round trip; two Gets mirror the two
//     Txn.Get calls of the Canopy transfer (txnbench.Canopy).
//
// Keys and values are bytes; etcd stores them as given.
package etcdbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/canopy-db/canopy/internal/bench/txnbench"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// AttemptsMaxDefault bounds the runs of one transfer; it matches Canopy's
// client.Options.TxnAttemptsMax default.
const AttemptsMaxDefault = 20

// ErrConflict is returned by Transfer when every attempt lost its
// compare to a concurrent write.
var ErrConflict = errors.New("etcdbench: transfer lost every compare-and-swap")

// Client is an etcd client shared by the benchmark's workers (as one
// client.DB is shared by Canopy's): one gRPC connection per endpoint,
// balanced round-robin by the etcd client.
type Client struct {
	cli *clientv3.Client
	// AttemptsMax bounds the runs of one Transfer (default
	// AttemptsMaxDefault).
	AttemptsMax int
}

// DialTimeout bounds connecting to the endpoints in Open.
const DialTimeout = 10 * time.Second

// Open connects to the etcd members at endpoints (host:port) and checks
// that the cluster answers (a linearizable Get of one key).
func Open(ctx context.Context, endpoints []string) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("etcdbench: no endpoints")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: DialTimeout,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdbench: connecting to %v: %w", endpoints, err)
	}
	c := &Client{cli: cli, AttemptsMax: AttemptsMaxDefault}
	pctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, "etcdbench/ping"); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcdbench: cluster at %v does not answer: %w", endpoints, err)
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error { return c.cli.Close() }

// Put writes key = value.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	_, err := c.cli.Put(ctx, string(key), string(value))
	return err
}

// Get reads key, linearizably.
func (c *Client) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	resp, err := c.cli.Get(ctx, string(key))
	if err != nil {
		return nil, false, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// get returns key's value and its ModRevision.
func (c *Client) get(ctx context.Context, key []byte) ([]byte, int64, error) {
	resp, err := c.cli.Get(ctx, string(key))
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, fmt.Errorf("etcdbench: key %q is missing", key)
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// Transfer implements txnbench.Store with a compare-and-swap on both keys'
// revisions (see the package comment).
func (c *Client) Transfer(ctx context.Context, from, to []byte, amount int64) (attempts int, err error) {
	attemptsMax := c.AttemptsMax
	if attemptsMax <= 0 {
		attemptsMax = AttemptsMaxDefault
	}
	for attempts = 1; attempts <= attemptsMax; attempts++ {
		fv, frev, err := c.get(ctx, from)
		if err != nil {
			return attempts, err
		}
		tv, trev, err := c.get(ctx, to)
		if err != nil {
			return attempts, err
		}
		nf, nt, err := txnbench.Moved(fv, tv, amount)
		if err != nil {
			return attempts, err
		}
		resp, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(string(from)), "=", frev),
				clientv3.Compare(clientv3.ModRevision(string(to)), "=", trev)).
			Then(clientv3.OpPut(string(from), string(nf)), clientv3.OpPut(string(to), string(nt))).
			Commit()
		if err != nil {
			return attempts, err
		}
		if resp.Succeeded {
			return attempts, nil
		}
	}
	return attemptsMax, fmt.Errorf("%w: %d attempts", ErrConflict, attemptsMax)
}
