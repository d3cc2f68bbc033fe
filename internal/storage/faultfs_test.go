package storage

import (
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestFaultFS checks that a FaultFS forwards syncs, fails them while told
// to, holds them during a stall until cleared, and unwraps to the OS file
// system for IsOSFS.
func TestFaultFS(t *testing.T) {
	fs := NewFaultFS(vfs.NewMem())
	f, err := fs.Create("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync without a fault: %v", err)
	}
	fs.FailSyncs()
	if err := f.Sync(); !errors.Is(err, ErrInjectedSync) {
		t.Fatalf("sync while failing = %v, want ErrInjectedSync", err)
	}
	if err := f.SyncData(); !errors.Is(err, ErrInjectedSync) {
		t.Fatalf("SyncData while failing = %v, want ErrInjectedSync", err)
	}
	if _, failing := fs.Faults(); !failing {
		t.Fatal("Faults does not report the failing syncs")
	}
	fs.ClearFaults()
	if err := f.Sync(); err != nil {
		t.Fatalf("sync after ClearFaults: %v", err)
	}
	fs.StallSyncs(time.Hour) // bounded by FaultStallMax; cleared below
	if left, _ := fs.Faults(); left <= 0 || left > FaultStallMax {
		t.Fatalf("stall left %v, want in (0, %v]", left, FaultStallMax)
	}
	done := make(chan error, 1)
	go func() { done <- f.Sync() }()
	select {
	case err := <-done:
		t.Fatalf("sync returned during a stall: %v", err)
	default:
	}
	fs.ClearFaults()
	if err := <-done; err != nil {
		t.Fatalf("stalled sync after ClearFaults: %v", err)
	}
	if !IsOSFS(NewFaultFS(nil)) || IsOSFS(fs) || !IsOSFS(nil) {
		t.Error("IsOSFS does not see through a FaultFS")
	}
}
