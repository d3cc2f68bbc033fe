package rpc

import "google.golang.org/grpc"

// Flow-control windows, static on both ends of every connection.
//
// gRPC-Go's default is a dynamic window sized by a bandwidth-delay
// product estimator: a receiver of data sends a PING (and a window update
// before it) once per round trip on every busy connection, until the
// window reaches 16 MiB, which a connection of small messages never
// does. Canopy's connections carry small messages (puts, Raft appends,
// timestamp fetches), so the estimator's frames never stopped: in a
// hierarchy benchmark at low load 4 socket writes in 10 were these
// 13- to 47-byte frames and their acknowledgements, each a system call
// and a wake-up on both ends. Setting the windows disables the
// estimator, as CockroachDB does (2 MiB per stream, 16 times that per
// connection: large enough that a snapshot or a backup stream is not
// held up on a LAN).
const (
	// StreamWindowBytes is the initial window of each stream.
	StreamWindowBytes = 2 << 20
	// ConnWindowBytes is the initial window of each connection.
	ConnWindowBytes = 16 * StreamWindowBytes
)

// ServerOptions returns the gRPC server options of the windows.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(StreamWindowBytes), grpc.InitialConnWindowSize(ConnWindowBytes)}
}

// DialOptions returns the gRPC dial options of the windows.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(StreamWindowBytes), grpc.WithInitialConnWindowSize(ConnWindowBytes)}
}
