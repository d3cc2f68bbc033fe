package kvserver

import (
	"errors"
	"io"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RaftStream implements rpcpb.InternalServer: the receiving end of a
// peer's Raft stream (see transport). Each message is stepped as the
// unary Raft RPC steps it; the stream ends when the peer closes it, or
// when Stop stops the server, which cancels it.
func (s *internalService) RaftStream(stream rpcpb.Internal_RaftStreamServer) error {
	n := s.n
	// Counted as trackHandler counts unary handlers (it intercepts unary
	// calls only), so that Stop waits for this one before it closes the
	// engine that receiveRaft reads.
	n.handlersMu.RLock()
	if n.handlersStopped {
		n.handlersMu.RUnlock()
		return status.Error(codes.Unavailable, "node is stopping")
	}
	n.handlers.Add(1)
	n.handlersMu.RUnlock()
	defer n.handlers.Done()
	return serveRaftStream(stream, func(b *rpcpb.RaftMessageBatch) {
		// Any batch, even empty, says that its sender is alive.
		from := b.FromNodeId
		if from == 0 && len(b.Messages) > 0 {
			from = b.Messages[0].FromNodeId // sent before the sender's first beat
		}
		n.liveness.heardFrom(from)
		for _, m := range b.Messages {
			// Snapshots, whose refusal matters, come by the unary RPC.
			_ = n.receiveRaft(m)
		}
	})
}

// serveRaftStream hands every batch received on stream to receive, in
// order, until the stream ends.
func serveRaftStream(stream rpcpb.Internal_RaftStreamServer, receive func(*rpcpb.RaftMessageBatch)) error {
	for {
		b, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&rpcpb.RaftMessageBatchResponse{})
		}
		if err != nil {
			return err
		}
		receive(b)
	}
}
