package client

import "github.com/canopy-db/canopy/internal/eval"

// The in-process nodes of this package's tests check their Puts' key cache
// against the store (kvserver/keystates.go).
func init() { eval.VerifyKeyStatesForTesting(true) }
