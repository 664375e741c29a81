// Package layers holds the test that keeps the module's import graph
// pointing down (layers_test.go). It has no code of its own.
//
// Every top-level directory of the module is one tree, and every tree has
// a rank:
//
//	0  vfs, version, internal,            nothing of the module below them
//	   diskprobe, progress
//	1  pagestore, wal, btreeidx           storage engines, the key index
//	                                      and its base file
//	2  schema                             etcd's bucket names, format detection
//	3  mvcc, raft                         the state machine and the log
//	4  lease, auth, membership            state beside mvcc
//	5  etcdsnap                           etcd's snapshot.db writer
//	6  server, tools, bench,              the gRPC server, offline tools, benchmarks,
//	   grpcproxy, tcpproxy                etcd's gRPC proxy and L4 gateway
//	7  cmd                                binaries
//
// A package may import packages of its own tree and of trees of a lower
// rank, never of a tree of the same or a higher rank: so the offline tools
// never pull in the gRPC server, the server never pulls in the benchmark
// tree, and the benchmarks never pull in the tools. The few deliberate
// exceptions are listed, with their reason, in layers_test.go. The bbolt
// library may be imported only by tests, benchmarks (bench/) and the tools
// (tools/), which read and write etcd's snapshot.db; the core writes
// bbolt's layout with its own code (package etcdsnap).
package layers
