package bench

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucketHoldsItsValue(t *testing.T) {
	values := []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 123_456_789, 1<<63 + 12345, 1<<64 - 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		values = append(values, rng.Uint64()>>rng.IntN(64))
	}
	for _, v := range values {
		i := bucketOf(v)
		if i < 0 || i >= histogramBuckets {
			t.Fatalf("value %d: bucket %d out of range [0,%d)", v, i, histogramBuckets)
		}
		low, width := bucketLow(i)
		if v < low || v-low >= width {
			t.Fatalf("value %d in bucket %d which holds [%d, %d+%d)", v, i, low, low, width)
		}
		if v >= subBuckets && float64(width)/float64(low) > 1.0/subBuckets+1e-12 {
			t.Fatalf("value %d: bucket width %d is more than 1/%d of %d", v, width, subBuckets, low)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var h histogram
	if got := h.quantile(0.5); got != 0 {
		t.Fatalf("empty histogram: p50 %v, want 0", got)
	}
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Microsecond}, {0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(c.q)
		if diff := float64(got-c.want) / float64(c.want); diff < -0.016 || diff > 0.016 {
			t.Errorf("q%.2f = %v, want %v within 1.6%%", c.q, got, c.want)
		}
	}
}

func TestMergeAddsCounts(t *testing.T) {
	var a, b histogram
	a.record(time.Millisecond)
	b.record(3 * time.Millisecond)
	b.record(3 * time.Millisecond)
	b.record(-time.Second) // clamped to 0, still counted
	a.merge(&b)
	if a.total != 4 {
		t.Fatalf("merged total %d, want 4", a.total)
	}
	if got := a.quantile(1); got < 2950*time.Microsecond || got > 3050*time.Microsecond {
		t.Fatalf("merged max %v, want about 3ms", got)
	}
	if got := a.quantile(0); got != 0 {
		t.Fatalf("merged min %v, want 0 (the negative value, clamped)", got)
	}
}
