package tso

import (
	"context"
	"sync"
)

// MemPersister is a Persister that keeps the bound in memory, for tests and
// single-process simulations. Several Oracles may share one, as replicas
// of the oracle's range share the replicated bound.
type MemPersister struct {
	mu struct {
		sync.Mutex
		bound uint64
	}
}

// CASBound implements Persister.
func (m *MemPersister) CASBound(ctx context.Context, expected, new uint64) (uint64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.bound != expected {
		return m.mu.bound, false, nil
	}
	m.mu.bound = new
	return new, true, nil
}

// LoadBound implements Persister.
func (m *MemPersister) LoadBound(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.bound, nil
}
