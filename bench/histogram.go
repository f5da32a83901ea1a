package bench

import (
	"math/bits"
	"time"
)

// histogram records latencies without allocating on the hot path, so a
// workload can time every operation while the allocation count of the run
// still belongs to the lock library. Buckets are log-linear: 64 sub-buckets
// per power of two, so every recorded value is off by less than 1.6%.
type histogram struct {
	counts [histogramBuckets]uint32
	total  uint64
}

const (
	subBucketBits    = 6
	subBuckets       = 1 << subBucketBits
	histogramBuckets = (64 - subBucketBits + 1) * subBuckets
)

func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - subBucketBits - 1
	return (shift+1)*subBuckets + int((v>>uint(shift))&(subBuckets-1))
}

// bucketLow is the smallest value that lands in bucket i; quantiles report it
// plus half the bucket width, the midpoint of what the bucket holds.
func bucketLow(i int) (low, width uint64) {
	if i < subBuckets {
		return uint64(i), 1
	}
	shift := uint(i/subBuckets - 1)
	return (uint64(subBuckets) | uint64(i%subBuckets)) << shift, 1 << shift
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.total++
}

func (h *histogram) merge(other *histogram) {
	for i, c := range other.counts {
		h.counts[i] += c
	}
	h.total += other.total
}

// quantile returns the value below which a fraction q of the recorded
// durations lie; 0 when nothing was recorded.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			low, width := bucketLow(i)
			return time.Duration(low + width/2)
		}
	}
	return 0
}
