// Package process tests Canopy as its users run it: the canopy binary,
// built from this checkout, started as separate operating-system processes
// on loopback ports, driven through the CLI and the Go client, with nodes
// killed by SIGKILL and restarted from their stores.
//
// The tests only wait for liveness (generous deadlines); no timing decides
// whether they pass. They are skipped under -short and when no go command
// is on PATH to build the binary.
package process
