package hierarchy

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidArgument marks a bad configuration, tree or part: the caller's
// mistake, not a conflict. The message names the limit or the problem.
var ErrInvalidArgument = errors.New("hierarchy: invalid argument")

// ErrOverloaded is returned by Propose when the leaf already holds
// PendingMax parts: the caller answers the client with a retryable error
// (the transaction did not commit). Inner validators refuse nothing: what
// they hold is bounded by what their leaves hold.
var ErrOverloaded = errors.New("hierarchy: validator overloaded")

// Variant is the concurrency-control variant of the thesis (3.2.5, 3.3).
type Variant uint8

const (
	// Locking (the default) is 3.3.1: a leaf's commit timestamp is the
	// smallest above its clock and the snapshot; clocks are moved forward by
	// the decisions coming down; a decision leaves its validator at once.
	Locking Variant = iota + 1
	// Timestamps is 3.3.2: leaves use pre-assigned round-robin timestamps
	// (leaf slot j of n owns j, j+n, j+2n, ...), and a deciding (or
	// forwarding) validator releases commits in timestamp order, once its
	// stable timestamp, the lowest timestamp its children have promised not
	// to go below, has passed them.
	Timestamps
)

func (v Variant) String() string {
	switch v {
	case Locking:
		return "locking"
	case Timestamps:
		return "timestamps"
	}
	return fmt.Sprintf("Variant(%d)", uint8(v))
}

// ParseVariant reads "locking" or "timestamps".
func ParseVariant(s string) (Variant, error) {
	switch s {
	case "locking":
		return Locking, nil
	case "timestamps":
		return Timestamps, nil
	}
	return 0, fmt.Errorf("%w: variant %q is not locking or timestamps", ErrInvalidArgument, s)
}

// Batching is one message path's batching (3.4): messages wait at the sender
// until SizeMax of them are queued for the same destination, or until the
// oldest has waited Timeout, whichever comes first.
type Batching struct {
	// SizeMax is the number of items (votes or decisions) per message.
	// 1 sends every item at once (no batching). In [1, BatchSizeMaxMax].
	// Default 1. Larger: fewer messages, more latency (thesis 4.2.2).
	SizeMax int
	// Timeout is how long a batch that has not filled up may wait. In
	// (0, BatchTimeoutMax]. Default 1ms. Unused when SizeMax is 1.
	Timeout time.Duration
}

// Limits of Batching.
const (
	BatchSizeMaxMax = 10_000
	BatchTimeoutMax = time.Second
)

// Defaults of Config.
const (
	DefaultBatchTimeout   = time.Millisecond
	DefaultPendingMax     = 100_000
	DefaultKeysPerPartMax = 10_000
	DefaultLatestKeysMax  = 1 << 20
)

// Config configures one validator. The zero value of every field but Tree
// and ID is the default; EnsureDefaults fills them in and Validate rejects
// the rest. Every validator of a tree must run with the same Tree and
// Variant.
type Config struct {
	// Tree is the hierarchy this validator is part of. Required.
	Tree *Tree
	// ID is this validator's place in Tree.
	ID ValidatorID
	// Variant is the concurrency control. Default Locking.
	Variant Variant
	// ValidatorBatch batches votes sent up to the parent (path 1 of 3.4).
	ValidatorBatch Batching
	// NodeBatch batches decisions sent to data nodes (path 2 of 3.4).
	NodeBatch Batching
	// PendingMax bounds the parts a leaf holds while they wait for their
	// decision. Default 100,000.
	PendingMax int
	// KeysPerPartMax bounds the read plus write keys of one part.
	// Default 10,000.
	KeysPerPartMax int
	// ResendAfter is how long a leaf waits for the decision of a part
	// before it votes again and asks its caller to look the transaction up
	// in the status table (Ready.Lookups); an inner validator forgets a
	// transaction no vote came for in twice that time. It is what makes up
	// for messages lost with a crashed validator; larger: slower recovery,
	// smaller: more duplicate votes under load. In [1ms, 1h]. Default 1s.
	ResendAfter time.Duration
	// LatestKeysMax bounds a leaf's table of latest versions. When it is
	// full, the entries with the lowest versions are dropped and the
	// table's floor rises to the highest dropped version: a key that is not
	// in the table counts as written at the floor, so a transaction whose
	// snapshot is below the floor and that touches such a key aborts
	// (safe, and rare when the table is large). Default 1,048,576.
	LatestKeysMax int
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Variant == 0 {
		c.Variant = Locking
	}
	for _, b := range []*Batching{&c.ValidatorBatch, &c.NodeBatch} {
		if b.SizeMax == 0 {
			b.SizeMax = 1
		}
		if b.Timeout == 0 {
			b.Timeout = DefaultBatchTimeout
		}
	}
	if c.PendingMax == 0 {
		c.PendingMax = DefaultPendingMax
	}
	if c.KeysPerPartMax == 0 {
		c.KeysPerPartMax = DefaultKeysPerPartMax
	}
	if c.LatestKeysMax == 0 {
		c.LatestKeysMax = DefaultLatestKeysMax
	}
	if c.ResendAfter == 0 {
		c.ResendAfter = DefaultResendAfter
	}
}

// Validate rejects a configuration EnsureDefaults has not made usable.
// Errors wrap ErrInvalidArgument.
func (c *Config) Validate() error {
	switch {
	case c.Tree == nil:
		return fmt.Errorf("%w: no tree", ErrInvalidArgument)
	case !c.Tree.Valid(c.ID):
		return fmt.Errorf("%w: validator %d is not in tree %s", ErrInvalidArgument, c.ID, c.Tree)
	case c.Variant != Locking && c.Variant != Timestamps:
		return fmt.Errorf("%w: unknown variant %d", ErrInvalidArgument, c.Variant)
	case c.PendingMax < 1:
		return fmt.Errorf("%w: pending max %d is below 1", ErrInvalidArgument, c.PendingMax)
	case c.KeysPerPartMax < 1:
		return fmt.Errorf("%w: keys per part max %d is below 1", ErrInvalidArgument, c.KeysPerPartMax)
	case c.ResendAfter < time.Millisecond || c.ResendAfter > time.Hour:
		return fmt.Errorf("%w: resend after %v not in [1ms, 1h]", ErrInvalidArgument, c.ResendAfter)
	case c.LatestKeysMax < 2:
		return fmt.Errorf("%w: latest keys max %d is below 2", ErrInvalidArgument, c.LatestKeysMax)
	}
	for _, b := range []struct {
		name string
		b    Batching
	}{{"validator batch", c.ValidatorBatch}, {"node batch", c.NodeBatch}} {
		if b.b.SizeMax < 1 || b.b.SizeMax > BatchSizeMaxMax {
			return fmt.Errorf("%w: %s size %d not in [1, %d]", ErrInvalidArgument, b.name, b.b.SizeMax, BatchSizeMaxMax)
		}
		if b.b.Timeout <= 0 || b.b.Timeout > BatchTimeoutMax {
			return fmt.Errorf("%w: %s timeout %v not in (0, %v]", ErrInvalidArgument, b.name, b.b.Timeout, BatchTimeoutMax)
		}
	}
	return nil
}
