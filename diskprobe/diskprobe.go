// Package diskprobe measures what etcd's recommended fio profile measures:
// sequential 2300-byte writes to one file, each followed by fdatasync, as
//
//	fio --rw=write --ioengine=sync --fdatasync=1 --bs=2300 --size=22m
//
// does. Like fio, it removes any old test file, creates it, preallocates
// it with fallocate(2) and then writes it from the start with write(2),
// calling fdatasync(2) after every write. It reports the fdatasync latency
// distribution, the sequential sync IOPS (writes, each made durable, per
// second) and a verdict against etcd's guidance: a p99 fdatasync under
// 10 ms, at least 50 sequential IOPS, preferably 500.
//
// The server's start-up probe (server/diskprobe.go) and `stratabench disk`
// (bench/disk, which adds the fio comparison, the text summary and the
// plot) both use it. It is a leaf: it imports nothing of Strata's, so the
// server links no benchmark or tool code through it.
package diskprobe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults, from etcd's fio profile.
const (
	DefaultBlockSize = 2300
	DefaultSize      = 22 << 20
)

// etcd's guidance.
const (
	// MaxP99 is the p99 WAL fdatasync latency etcd asks for.
	MaxP99 = 10 * time.Millisecond
	// MinIOPS is etcd's minimum of sequential sync IOPS.
	MinIOPS = 50
	// PreferredIOPS is what etcd recommends for heavily loaded clusters.
	PreferredIOPS = 500
)

// Options configure a measurement. Only Dir is required.
type Options struct {
	// Dir is the directory on the device to test. It must exist.
	Dir string
	// File is the test file's name inside Dir. Default
	// "stratabench-disk.<pid>.tmp". An existing file of that name is
	// replaced.
	File string
	// BlockSize is the size of each write. Default 2300 (etcd's profile).
	BlockSize int
	// Size is the file size: the test writes it once from the start.
	// Default 22 MiB (etcd's profile).
	Size int64
	// Count, if positive, stops after that many writes (at most
	// Size/BlockSize).
	Count int
	// Duration, if positive, stops after the first write that ends past
	// it, like fio's --runtime.
	Duration time.Duration
	// Keep leaves the test file in place; by default it is removed.
	Keep bool
	// Progress, if set, is called about every 50 ms and at the end with
	// the writes done, the writes planned and the time since the start.
	Progress func(done, planned int, elapsed time.Duration)
}

// Result is a measurement.
type Result struct {
	Dir       string        `json:"dir"`
	BlockSize int           `json:"block_size"`
	Writes    int           `json:"writes"`
	Bytes     int64         `json:"bytes"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	// IOPS is Writes per second of Elapsed, each write followed by its
	// fdatasync: fio's write IOPS for this profile.
	IOPS float64 `json:"iops"`
	// Sync is the fdatasync latency distribution; Write is write(2)'s.
	Sync    Latency `json:"fdatasync"`
	Write   Latency `json:"write"`
	Verdict Verdict `json:"verdict"`
	// Syncs holds every fdatasync latency in the order measured.
	Syncs []time.Duration `json:"-"`
	// Ends holds, for each write, when its fdatasync returned, as time
	// since the start; callers that leave out a warm-up compute the rate
	// of the rest from it.
	Ends []time.Duration `json:"-"`
}

// Latency summarises a latency sample.
type Latency struct {
	Min  time.Duration `json:"min_ns"`
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p99_9_ns"`
	Max  time.Duration `json:"max_ns"`
}

// Verdict grades a result against etcd's guidance.
type Verdict struct {
	// OK is false when the disk misses etcd's requirements: p99 fdatasync
	// of 10 ms or more, or fewer than 50 IOPS.
	OK bool `json:"ok"`
	// Grade is "good" (p99 < 10 ms and >= 500 IOPS), "adequate" (meets
	// the minimum only) or "too slow".
	Grade string `json:"grade"`
	// Notes explain the grade, one finding each.
	Notes []string `json:"notes"`
}

// Run measures. It returns an error if the file cannot be created or a
// write or fdatasync fails; ctx cancels between writes.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Dir == "" {
		return nil, errors.New("diskprobe: no directory given")
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.BlockSize < 0 || o.BlockSize > 64<<20 {
		return nil, fmt.Errorf("diskprobe: block size %d out of range (1 byte to 64 MiB)", o.BlockSize)
	}
	if o.Size < int64(o.BlockSize) {
		return nil, fmt.Errorf("diskprobe: size %d is smaller than one block of %d bytes", o.Size, o.BlockSize)
	}
	if o.Count < 0 || o.Duration < 0 {
		return nil, errors.New("diskprobe: count and duration must not be negative")
	}
	st, err := os.Stat(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("diskprobe: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("diskprobe: %s is not a directory", o.Dir)
	}
	if o.File == "" {
		o.File = fmt.Sprintf("stratabench-disk.%d.tmp", os.Getpid())
	}
	if filepath.Base(o.File) != o.File {
		return nil, fmt.Errorf("diskprobe: file name %q must not contain a directory", o.File)
	}
	planned := int(o.Size / int64(o.BlockSize))
	if o.Count > 0 && o.Count < planned {
		planned = o.Count
	}

	path := filepath.Join(o.Dir, o.File)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("diskprobe: remove old test file: %w", err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("diskprobe: create %s: %w", path, err)
	}
	closed := false
	defer func() {
		if !closed {
			unix.Close(fd)
		}
		if !o.Keep {
			os.Remove(path)
		}
	}()
	// fio lays the file out with fallocate(2) (mode 0) before writing;
	// file systems without it just grow the file as it is written.
	if err := unix.Fallocate(fd, 0, 0, int64(planned)*int64(o.BlockSize)); err != nil &&
		!errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return nil, fmt.Errorf("diskprobe: preallocate %s: %w", path, err)
	}

	buf := make([]byte, o.BlockSize)
	fill(buf)
	res := &Result{Dir: o.Dir, BlockSize: o.BlockSize, Syncs: make([]time.Duration, 0, min(planned, 1<<20))}
	res.Ends = make([]time.Duration, 0, cap(res.Syncs))
	writes := make([]time.Duration, 0, cap(res.Syncs))
	start := time.Now()
	lastReport := start
	for i := 0; i < planned; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := writeFull(fd, buf); err != nil {
			return nil, fmt.Errorf("diskprobe: write %s at offset %d: %w", path, int64(i)*int64(o.BlockSize), err)
		}
		t1 := time.Now()
		if err := fdatasync(fd); err != nil {
			return nil, fmt.Errorf("diskprobe: fdatasync %s: %w", path, err)
		}
		t2 := time.Now()
		writes = append(writes, t1.Sub(t0))
		res.Syncs = append(res.Syncs, t2.Sub(t1))
		elapsed := t2.Sub(start)
		res.Ends = append(res.Ends, elapsed)
		if o.Duration > 0 && elapsed >= o.Duration {
			planned = i + 1
			break
		}
		if o.Progress != nil && t2.Sub(lastReport) >= 50*time.Millisecond {
			lastReport = t2
			o.Progress(i+1, planned, elapsed)
		}
	}
	res.Elapsed = time.Since(start)
	closed = true
	if err := unix.Close(fd); err != nil {
		return nil, fmt.Errorf("diskprobe: close %s: %w", path, err)
	}
	res.Writes = len(res.Syncs)
	res.Bytes = int64(res.Writes) * int64(o.BlockSize)
	if res.Elapsed > 0 {
		res.IOPS = float64(res.Writes) / res.Elapsed.Seconds()
	}
	res.Sync = Summarize(res.Syncs)
	res.Write = Summarize(writes)
	res.Verdict = Judge(res.Sync.P99, res.IOPS)
	if o.Progress != nil {
		o.Progress(res.Writes, planned, res.Elapsed)
	}
	return res, nil
}

// fill gives the buffer incompressible-looking content (fio writes random
// data by default), so compressing or deduplicating storage cannot skip it.
func fill(b []byte) {
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("short write")
		}
		b = b[n:]
	}
	return nil
}

func fdatasync(fd int) error {
	for {
		err := unix.Fdatasync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// Summarize computes the latency summary of a sample; percentiles are
// nearest-rank. An empty sample gives zeros.
func Summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Latency{
		Min: s[0], Max: s[len(s)-1], Mean: sum / time.Duration(len(s)),
		P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99), P999: Percentile(s, 99.9),
	}
}

// Percentile is the nearest-rank p-th percentile of sorted, which must be
// sorted ascending and non-empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(len(sorted))-1e-9)) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

// Judge grades a p99 fdatasync latency and sequential sync IOPS against
// etcd's guidance.
func Judge(p99 time.Duration, iops float64) Verdict {
	v := Verdict{OK: true, Grade: "good"}
	if p99 >= MaxP99 {
		v.OK = false
		v.Notes = append(v.Notes, fmt.Sprintf("p99 fdatasync %s is not under etcd's 10 ms limit", fmtDur(p99)))
	} else {
		v.Notes = append(v.Notes, fmt.Sprintf("p99 fdatasync %s is under etcd's 10 ms limit", fmtDur(p99)))
	}
	switch {
	case iops < MinIOPS:
		v.OK = false
		v.Notes = append(v.Notes, fmt.Sprintf("%.0f sequential sync IOPS is below etcd's minimum of %d", iops, MinIOPS))
	case iops < PreferredIOPS:
		v.Grade = "adequate"
		v.Notes = append(v.Notes, fmt.Sprintf("%.0f sequential sync IOPS meets etcd's minimum of %d but not the %d it recommends for heavily loaded clusters",
			iops, MinIOPS, PreferredIOPS))
	default:
		v.Notes = append(v.Notes, fmt.Sprintf("%.0f sequential sync IOPS meets etcd's recommended %d", iops, PreferredIOPS))
	}
	if !v.OK {
		v.Grade = "too slow"
	}
	return v
}

// fmtDur prints a latency with three significant digits in µs or ms.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// FormatDuration is the latency format of the summaries.
func FormatDuration(d time.Duration) string { return fmtDur(d) }
