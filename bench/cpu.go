package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuSample is the CPU time this process and the nodes have used so far.
// Client, servers and (for slow-node) the proxy share the machine's cores,
// so what a library costs the servers shows in its latency as much as what
// it costs the client; the two per operation tell which side bounds it.
type cpuSample struct {
	client, servers time.Duration
}

func sampleCPU(ctx context.Context, nodes []redis.UniversalClient) (cpuSample, error) {
	var s cpuSample
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, fmt.Errorf("getrusage: %w", err)
	}
	s.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, node := range nodes {
		info, err := node.Info(ctx, "cpu").Result()
		if err != nil {
			return s, fmt.Errorf("INFO cpu: %w", err)
		}
		used, err := serverCPU(info)
		if err != nil {
			return s, err
		}
		s.servers += used
	}
	return s, nil
}

// serverCPU adds used_cpu_sys and used_cpu_user of an INFO cpu reply.
func serverCPU(info string) (time.Duration, error) {
	var total time.Duration
	found := 0
	for line := range strings.Lines(info) {
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (key != "used_cpu_sys" && key != "used_cpu_user") {
			continue
		}
		seconds, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s is %q, not a number", key, value)
		}
		total += time.Duration(math.Round(seconds * float64(time.Second)))
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu: used_cpu_sys and used_cpu_user not both reported")
	}
	return total, nil
}
