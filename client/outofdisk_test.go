package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// TestOutOfDiskError: a write refused for lack of disk space is
// ErrUnavailable (nothing was written, retry later) and ErrOutOfDisk; a
// plain UNAVAILABLE is not ErrOutOfDisk.
func TestOutOfDiskError(t *testing.T) {
	err := errorFromPB(&rpcpb.Error{Code: rpcpb.ErrorCode_UNAVAILABLE, Message: rpcpb.OutOfDiskPrefix + "range r5 on node n1: store /s has 1 MiB free"})
	if !errors.Is(err, ErrOutOfDisk) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("out of disk: %v", err)
	}
	if want := "canopy: unavailable: canopy: out of disk: range r5 on node n1: store /s has 1 MiB free"; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if ErrorClass(err) != "unavailable" {
		t.Fatalf("class %q", ErrorClass(err))
	}
	other := errorFromPB(&rpcpb.Error{Code: rpcpb.ErrorCode_UNAVAILABLE, Message: "no leader"})
	if errors.Is(other, ErrOutOfDisk) || !strings.Contains(other.Error(), "no leader") {
		t.Fatalf("plain unavailable: %v", other)
	}
}
