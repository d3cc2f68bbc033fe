package rpcpb

// Helpers on the generated request types, shared by client and server so
// that the per-request type switches are written once.

// Key returns the key a request addresses: the key of a point request, the
// start of a scan; nil for a refresh (which addresses spans).
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
		*RequestUnion_PlainPut, *RequestUnion_PlainPutUnlessExists:
		return true
	}
	return false
}
