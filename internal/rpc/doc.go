// Package rpc holds what every gRPC endpoint of Canopy shares beside the
// generated services (rpcpb): the HTTP/2 flow-control windows that nodes
// and clients set on their servers and connections.
//
// Contract: ServerOptions go to every grpc.NewServer of a node, and
// DialOptions to every grpc.NewClient of a node or a client, so that both
// ends of a connection use static windows of the sizes below.
package rpc
