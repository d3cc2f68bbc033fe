// Package testcluster starts clusters of real Canopy nodes inside one
// process (real Pebble stores in a directory, real gRPC over loopback), to
// be stopped and restarted one node at a time. Tests and `canopy demo`
// use it. Subpackage check holds the history checkers.
package testcluster
