// Package disk is the benchmark side of `stratabench disk`: the readable
// summary of a measurement, and the comparison of its figures with fio's
// JSON output of fio-profiles/etcd-wal.fio (`stratabench disk compare`,
// `make disk-check`). The measurement itself is package diskprobe, which
// the server's start-up probe uses too; diskplot draws the histogram.
package disk
