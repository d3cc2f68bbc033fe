package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/allocator"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/protobuf/proto"
)

// The transaction switches (pipelining, parallel commits, one-phase
// commit) are decided per transaction at Begin, most specific first:
// TxnOptions, then the client's Options, then the cluster setting, then
// the built-in default (on). The cluster setting is an rpcpb.TxnSwitches
// stored as a plain key in range 1 (SettingsKey), written by
// SetTxnSwitches (canopy admin setting) and read by every client at Open
// and then every Options.SettingsRefresh, so a change reaches every client
// within that period without a restart. A transaction keeps the switches
// it began with.

// SettingsKey is the plain key of the cluster's transaction switches. It
// lies in range 1, beside the node descriptors (0x00 'b' 'n') and the range
// ID counter (0x00 'b' 'r').
var SettingsKey = []byte{0x00, 'b', 's'}

// TxnSwitches is the cluster setting of the transaction optimisations:
// each Toggle is ToggleDefault (on), ToggleOn or ToggleOff.
type TxnSwitches struct {
	Pipelining      Toggle
	ParallelCommits Toggle
	OnePC           Toggle
}

func (s TxnSwitches) String() string {
	return fmt.Sprintf("pipelining=%s parallel_commits=%s one_pc=%s", s.Pipelining, s.ParallelCommits, s.OnePC)
}

func (s TxnSwitches) validate() error {
	for _, t := range []struct {
		name string
		t    Toggle
	}{{"Pipelining", s.Pipelining}, {"ParallelCommits", s.ParallelCommits}, {"OnePC", s.OnePC}} {
		if err := t.t.validate("TxnSwitches." + t.name); err != nil {
			return err
		}
	}
	return nil
}

// clusterSwitches holds the last cluster setting read. The zero value is
// "all default".
type clusterSwitches struct{ v atomic.Pointer[TxnSwitches] }

func (c *clusterSwitches) load() TxnSwitches {
	if p := c.v.Load(); p != nil {
		return *p
	}
	return TxnSwitches{}
}

// TxnSwitches reads the cluster's transaction switches.
func (db *DB) TxnSwitches(ctx context.Context) (TxnSwitches, error) {
	found, v, err := db.plainGet(ctx, SettingsKey)
	if err != nil || !found {
		return TxnSwitches{}, publicError(err)
	}
	var pb rpcpb.TxnSwitches
	if err := proto.Unmarshal(v, &pb); err != nil {
		return TxnSwitches{}, fmt.Errorf("%w: cluster setting TxnSwitches: %w", ErrInternal, err)
	}
	s := TxnSwitches{Pipelining: Toggle(pb.GetPipelining()), ParallelCommits: Toggle(pb.GetParallelCommits()), OnePC: Toggle(pb.GetOnePc())}
	if err := s.validate(); err != nil {
		return TxnSwitches{}, fmt.Errorf("%w: cluster setting TxnSwitches: %w", ErrInternal, err)
	}
	return s, nil
}

// SetTxnSwitches writes the cluster's transaction switches. Clients
// (this one at once) use them for transactions they begin after they read
// them (within Options.SettingsRefresh).
func (db *DB) SetTxnSwitches(ctx context.Context, s TxnSwitches) error {
	if err := s.validate(); err != nil {
		return err
	}
	v, err := proto.Marshal(&rpcpb.TxnSwitches{Pipelining: uint32(s.Pipelining), ParallelCommits: uint32(s.ParallelCommits), OnePc: uint32(s.OnePC)})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInternal, err)
	}
	if err := db.plainPut(ctx, SettingsKey, v, false); err != nil {
		return publicError(err)
	}
	db.switches.v.Store(&s)
	return nil
}

// refreshSwitches reads the cluster setting into db.switches. A failed
// read keeps the last value (logged, not fatal: the setting only tunes).
func (db *DB) refreshSwitches(ctx context.Context) error {
	s, err := db.TxnSwitches(ctx)
	if err != nil {
		return err
	}
	db.switches.v.Store(&s)
	return nil
}

// watchSwitches re-reads the cluster setting every Options.SettingsRefresh
// until the DB closes.
func (db *DB) watchSwitches() {
	t := time.NewTicker(db.opts.SettingsRefresh)
	defer t.Stop()
	for {
		select {
		case <-db.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(db.ctx, db.opts.SettingsRefresh)
			if err := db.refreshSwitches(ctx); err != nil && db.ctx.Err() == nil {
				db.opts.Logger.Debug("canopy client: reading the cluster's transaction switches failed; keeping the last", "err", err)
			}
			cancel()
		}
	}
}

// txnSwitches returns the switches of a transaction begun now with o.
func (db *DB) txnSwitches(o TxnOptions) (pipelining, parallelCommits, onePC bool) {
	cl := db.switches.load()
	pipelining = o.Pipelining.on(db.opts.Pipelining.on(cl.Pipelining.on(pipeliningDefault)))
	parallelCommits = pipelining && o.ParallelCommits.on(db.opts.ParallelCommits.on(cl.ParallelCommits.on(true)))
	onePC = o.OnePC.on(db.opts.OnePC.on(cl.OnePC.on(true)))
	return pipelining, parallelCommits, onePC
}

// Lease placement values (docs/design-notes.md, "Lease placement"):
// LeasesSpread (the default) spreads ranges' leases over the nodes;
// LeasesWithOracle puts every range's lease on the node that holds range
// 1's, so that writes take their timestamps without a round trip between
// nodes.
const (
	LeasesSpread     = string(allocator.LeasePlacementSpread)
	LeasesWithOracle = string(allocator.LeasePlacementOracle)
)

// LeasePlacement reads the cluster's lease placement setting (LeasesSpread
// when it was never set).
func (db *DB) LeasePlacement(ctx context.Context) (string, error) {
	found, v, err := db.plainGet(ctx, keys.LeasePlacementKey)
	if err != nil {
		return "", publicError(err)
	}
	if !found {
		return LeasesSpread, nil
	}
	p, err := allocator.ParseLeasePlacement(string(v))
	if err != nil {
		return "", fmt.Errorf("%w: cluster setting: %w", ErrInternal, err)
	}
	return string(p), nil
}

// SetLeasePlacement writes the cluster's lease placement setting: p is
// LeasesSpread or LeasesWithOracle (anything else is InvalidArgument).
// Every node reads it within its members refresh (2 s by default) and
// moves the leases it holds over its next balance rounds.
func (db *DB) SetLeasePlacement(ctx context.Context, p string) error {
	if _, err := allocator.ParseLeasePlacement(p); err != nil || p == "" {
		return invalidArgf("lease placement %q: want %q or %q", p, LeasesSpread, LeasesWithOracle)
	}
	return publicError(db.plainPut(ctx, keys.LeasePlacementKey, []byte(p), false))
}
