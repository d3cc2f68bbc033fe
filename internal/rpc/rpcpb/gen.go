// Package rpcpb holds Canopy's protobuf messages and gRPC services.
//
// The generated files are committed. To regenerate (needs protoc, and
// protoc-gen-go v1.36 and protoc-gen-go-grpc v1.6 on PATH: apt-get install
// protobuf-compiler; go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
// google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2):
//
//	go generate ./internal/rpc/rpcpb
package rpcpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative canopy.proto plain_scan.proto feed.proto canopy_membership.proto hierarchy.proto
