package rpcpb

import (
	"fmt"
	"hash/fnv"
)

// Helpers on the generated request types, shared by client and server so
// that the per-request type switches are written once.

// Key returns the key a request addresses: the key of a point request, the
// start of a scan or plain scan; nil for a refresh (which addresses spans).
func (r *RequestUnion) Key() []byte {
	switch v := r.GetValue().(type) {
	case *RequestUnion_Get:
		return v.Get.GetKey()
	case *RequestUnion_Scan:
		return v.Scan.GetStart()
	case *RequestUnion_PutIntent:
		return v.PutIntent.GetKey()
	case *RequestUnion_ResolveIntent:
		return v.ResolveIntent.GetKey()
	case *RequestUnion_Put:
		return v.Put.GetKey()
	case *RequestUnion_PlainGet:
		return v.PlainGet.GetKey()
	case *RequestUnion_PlainPut:
		return v.PlainPut.GetKey()
	case *RequestUnion_PlainPutUnlessExists:
		return v.PlainPutUnlessExists.GetKey()
	case *RequestUnion_QueryIntent:
		return v.QueryIntent.GetKey()
	case *RequestUnion_CommitOnePc:
		// Its first write: every write lies in that key's range, and the
		// 1PC record is kept there.
		if ws := v.CommitOnePc.GetWrites(); len(ws) > 0 {
			return ws[0].GetKey()
		}
	case *RequestUnion_QueryOnePc:
		return v.QueryOnePc.GetKey()
	case *RequestUnion_RecoverIntent:
		return v.RecoverIntent.GetKey()
	case *RequestUnion_PlainScan:
		return v.PlainScan.GetStart()
	case *RequestUnion_Prepare:
		// Its first key: every key lies in that key's range.
		if ws := v.Prepare.GetWrites(); len(ws) > 0 {
			return ws[0].GetKey()
		}
		if rs := v.Prepare.GetReads(); len(rs) > 0 {
			return rs[0]
		}
	}
	return nil
}

// WrittenValue returns the value a write request carries (nil for reads
// and for writes without one).
func (r *RequestUnion) WrittenValue() []byte {
	switch v := r.GetValue().(type) {
	case *RequestUnion_PutIntent:
		return v.PutIntent.GetValue()
	case *RequestUnion_Put:
		return v.Put.GetValue()
	case *RequestUnion_PlainPut:
		return v.PlainPut.GetValue()
	case *RequestUnion_PlainPutUnlessExists:
		return v.PlainPutUnlessExists.GetValue()
	}
	return nil
}

// IsWrite reports whether the request writes (is replicated through Raft).
func (r *RequestUnion) IsWrite() bool {
	switch r.GetValue().(type) {
	case *RequestUnion_PutIntent, *RequestUnion_ResolveIntent, *RequestUnion_Put,
		*RequestUnion_PlainPut, *RequestUnion_PlainPutUnlessExists,
		*RequestUnion_CommitOnePc, *RequestUnion_QueryOnePc, *RequestUnion_RecoverIntent,
		*RequestUnion_Prepare:
		return true
	}
	return false
}

// Method names a request type. It indexes the server's command table
// (internal/eval), so that dispatch is one table look-up rather than a type
// switch in every place that handles requests.
type Method uint8

// The request types, one per field of RequestUnion.
const (
	MethodNone Method = iota
	MethodGet
	MethodScan
	MethodPutIntent
	MethodResolveIntent
	MethodPut
	MethodRefresh
	MethodPlainGet
	MethodPlainPutUnlessExists
	MethodPlainPut
	MethodQueryIntent
	MethodCommitOnePC
	MethodQueryOnePC
	MethodRecoverIntent
	MethodPlainScan
	MethodPrepare
	MethodsMax // one past the last method
)

var methodNames = [MethodsMax]string{"None", "Get", "Scan", "PutIntent", "ResolveIntent", "Put", "Refresh", "PlainGet", "PlainPutUnlessExists", "PlainPut", "QueryIntent", "CommitOnePC", "QueryOnePC", "RecoverIntent", "PlainScan", "Prepare"}

func (m Method) String() string {
	if m < MethodsMax {
		return methodNames[m]
	}
	return "Method(?)"
}

// methoder is implemented by every field wrapper of RequestUnion's oneof.
type methoder interface{ method() Method }

func (*RequestUnion_Get) method() Method                  { return MethodGet }
func (*RequestUnion_Scan) method() Method                 { return MethodScan }
func (*RequestUnion_PutIntent) method() Method            { return MethodPutIntent }
func (*RequestUnion_ResolveIntent) method() Method        { return MethodResolveIntent }
func (*RequestUnion_Put) method() Method                  { return MethodPut }
func (*RequestUnion_Refresh) method() Method              { return MethodRefresh }
func (*RequestUnion_PlainGet) method() Method             { return MethodPlainGet }
func (*RequestUnion_PlainPutUnlessExists) method() Method { return MethodPlainPutUnlessExists }
func (*RequestUnion_PlainPut) method() Method             { return MethodPlainPut }
func (*RequestUnion_QueryIntent) method() Method          { return MethodQueryIntent }
func (*RequestUnion_CommitOnePc) method() Method          { return MethodCommitOnePC }
func (*RequestUnion_QueryOnePc) method() Method           { return MethodQueryOnePC }
func (*RequestUnion_RecoverIntent) method() Method        { return MethodRecoverIntent }
func (*RequestUnion_PlainScan) method() Method            { return MethodPlainScan }
func (*RequestUnion_Prepare) method() Method              { return MethodPrepare }

// Method returns the request's type (MethodNone if unset).
func (r *RequestUnion) Method() Method {
	if m, ok := r.GetValue().(methoder); ok {
		return m.method()
	}
	return MethodNone
}

// NewError returns a wire error with a formatted message.
func NewError(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error makes a wire error a Go error, for code that passes it through an
// error-typed path.
func (e *Error) Error() string { return e.GetCode().String() + ": " + e.GetMessage() }

// IntentValueHash is the hash by which QueryIntent recognises the value of
// an intent (FNV-1a 64 of the value, with the tombstone flag first), so
// that a proof does not carry the value again.
func IntentValueHash(value []byte, isDelete bool) uint64 {
	h := fnv.New64a()
	if isDelete {
		_, _ = h.Write([]byte{1})
	} else {
		_, _ = h.Write([]byte{0})
	}
	_, _ = h.Write(value)
	return h.Sum64()
}
