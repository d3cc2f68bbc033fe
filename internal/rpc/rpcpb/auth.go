package rpcpb

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IsAuthRefusal reports whether err is a node's refusal of the caller
// (internal/security.Authorize, applied by the node's interceptor before
// any handler runs): codes.Unauthenticated (no client certificate) or
// codes.PermissionDenied (the caller's user may not make this request).
// Such an RPC was not executed, and sending it again, to this node or
// another, gets the same answer.
func IsAuthRefusal(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}
