// Package nemesis holds the short nemesis run of `go test ./...`: three real
// `canopy start` processes, the list-append workload and every fault kind of
// internal/nemesis at least once, then a heal and the history checkers; it
// asserts that the history was checked and holds no violation. The long
// runs are `canopy nemesis --duration 30m` (docs/RELIABILITY.md).
package nemesis
