// Package harness runs etcd-compatible server binaries and etcd's command-line
// tools for Strata's end-to-end tests.
//
// The pieces:
//
//   - [Binaries] finds (and, when asked, builds via build-etcd.sh) the
//     reference etcd 3.7 binaries in a cache directory outside the repository.
//   - [Server] starts one member of etcd or strata with a flag list on free
//     loopback ports and its own data dir, waits for etcd's lifecycle line
//     "ready to serve client requests", stops it with SIGTERM (then SIGKILL)
//     and restarts it on the same data dir and ports.
//   - [Ctl] runs etcdctl against a server and returns stdout, stderr and the
//     exit code; [Proc] is a long-running tool (watch, elect) read while it
//     runs.
//   - [Cluster] is N members started with a static --initial-cluster;
//     [NewClusterWithProxies] puts a [Network] of fault-injecting TCP
//     proxies in front of their peer ports (delay, drop, blackhole,
//     one-way partitions, isolation, per ordered pair of members).
//   - [Normalizer] masks what legitimately differs between two correct
//     servers (ids, times, ports, paths, storage-engine sizes) so outputs can
//     be diffed byte for byte; [UnifiedDiff] shows what is left.
//
// Nothing here knows whether a binary is etcd or strata: both take etcd's
// flags and print etcd's lifecycle line, which is the contract the harness
// relies on.
package harness
