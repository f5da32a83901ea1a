package main

import (
	"slices"
	"time"
)

// The demo records what its workers did and judges the record afterwards, in this file:
// the workload never judges itself.

// writeResult is what became of a worker's fenced increment.
type writeResult int

const (
	writeNotTried  writeResult = iota // the read failed, or a stalled worker found no newer holder
	writeApplied                      // fence.Set accepted the token
	writeRejected                     // fence.Set refused the token as stale
	writeAmbiguous                    // the write failed in a way that leaves open whether it landed
)

// acquisition is one successful acquisition of the demo lock and what its holder did.
type acquisition struct {
	worker    int
	token     int64
	invoked   time.Time // Acquire called
	acquired  time.Time // Acquire returned the lock
	heldUntil time.Time // the earlier of the Release call and the end of the lock's validity
	write     writeResult
	stalled   bool // the worker deliberately stalled past its TTL before writing
}

// verdict is the judgement of a demo run.
type verdict struct {
	acquisitions   int
	latencyP50     time.Duration // Acquire call to return, successful acquisitions
	latencyP99     time.Duration
	tokenOrder     int // acquisitions whose token is not above every token acquired before they started
	overlaps       int // acquisitions made while another holder's validity had not ended
	applied        int
	rejected       int
	ambiguous      int
	gaveUp         int // Acquire calls that gave up waiting (not a safety problem)
	stalls         int // holders that stalled past their TTL on purpose
	stalledWrites  int // writes attempted by stalled workers
	staleAccepted  int // of those, accepted: fencing failed
	counter        int64
	counterMatches bool // applied <= counter <= applied+ambiguous
}

// safe reports whether every safety check passed.
func (v verdict) safe() bool {
	return v.tokenOrder == 0 && v.overlaps == 0 && v.staleAccepted == 0 && v.counterMatches
}

// judge checks a demo history against the final counter value.
func judge(history []acquisition, counter int64) verdict {
	v := verdict{acquisitions: len(history), counter: counter}
	latencies := make([]time.Duration, 0, len(history))
	for _, a := range history {
		latencies = append(latencies, a.acquired.Sub(a.invoked))
		switch a.write {
		case writeApplied:
			v.applied++
		case writeRejected:
			v.rejected++
		case writeAmbiguous:
			v.ambiguous++
		}
		if a.stalled {
			v.stalls++
		}
		if a.stalled && a.write != writeNotTried {
			v.stalledWrites++
			if a.write == writeApplied {
				v.staleAccepted++
			}
		}
	}
	v.latencyP50, v.latencyP99 = percentile(latencies, 50), percentile(latencies, 99)
	v.tokenOrder = tokenOrderViolations(history)
	v.overlaps = overlappingHolds(history)
	v.counterMatches = counter >= int64(v.applied) && counter <= int64(v.applied+v.ambiguous)
	return v
}

// tokenOrderViolations counts acquisitions whose token is not strictly above the token of
// every acquisition that completed before they were even requested. Acquisitions that ran
// concurrently are not ordered by this observer and not compared, so a slow goroutine never
// causes a false alarm. Two acquisitions with the same token are always a violation.
func tokenOrderViolations(history []acquisition) int {
	byAcquired := slices.Clone(history)
	slices.SortFunc(byAcquired, func(x, y acquisition) int { return x.acquired.Compare(y.acquired) })
	byInvoked := slices.Clone(history)
	slices.SortFunc(byInvoked, func(x, y acquisition) int { return x.invoked.Compare(y.invoked) })

	violations := 0
	var highestBefore int64
	next := 0
	for _, b := range byInvoked {
		for next < len(byAcquired) && byAcquired[next].acquired.Before(b.invoked) {
			highestBefore = max(highestBefore, byAcquired[next].token)
			next++
		}
		if b.token <= highestBefore {
			violations++
		}
	}
	seen := make(map[int64]int, len(history))
	for _, a := range history {
		seen[a.token]++
	}
	for _, n := range seen {
		violations += n - 1
	}
	return violations
}

// overlappingHolds counts acquisitions that returned while an earlier holder was still
// within its validity and had not released: two holders at once, which Redlock must prevent.
func overlappingHolds(history []acquisition) int {
	byAcquired := slices.Clone(history)
	slices.SortFunc(byAcquired, func(x, y acquisition) int { return x.acquired.Compare(y.acquired) })
	overlaps := 0
	var busyUntil time.Time
	for _, a := range byAcquired {
		if a.acquired.Before(busyUntil) {
			overlaps++
		}
		if a.heldUntil.After(busyUntil) {
			busyUntil = a.heldUntil
		}
	}
	return overlaps
}

// percentile is the nearest-rank p-th percentile; 0 for no samples.
func percentile(samples []time.Duration, p int) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}
