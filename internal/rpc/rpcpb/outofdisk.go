package rpcpb

import "strings"

// OutOfDiskPrefix starts the message of the error a node returns for a
// write it refuses because the disk of its store is nearly full: code
// UNAVAILABLE (nothing was written; retry later, or elsewhere once the
// lease moves), message "out of disk: ...".
//
// ErrorCode has no code of its own for it: until one is added to
// canopy.proto (OUT_OF_DISK), clients recognise the error by this prefix
// with IsOutOfDisk, and a client that does not know it still treats it as
// the retryable UNAVAILABLE it is.
const OutOfDiskPrefix = "out of disk: "

// IsOutOfDisk reports whether e is a write refused for lack of disk space.
func IsOutOfDisk(e *Error) bool {
	return e.GetCode() == ErrorCode_UNAVAILABLE && strings.HasPrefix(e.GetMessage(), OutOfDiskPrefix)
}
