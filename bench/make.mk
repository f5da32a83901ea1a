# Benchmarks: bench/ is a nested module (see bench/README.md). These targets
# run from the repository root, like every make.mk the root Makefile includes.
#
#   make bench                     the whole matrix, table on stdout, JSON in bench/results/
#   make bench BENCH_FLAGS='--sizes 5 --workloads uncontended-1'
#   make bench BENCH_FLAGS='--sizes 5 --workloads uncontended-1,uncontended-16,uncontended-64,uncontended-256'
#   make bench BENCH_FLAGS='--sizes 5 --workloads held-locks'    (--held-locks 1000,10000 --held-for 10s)
#   make bench BENCH_FLAGS='--shards 0,1,2,3 --shard-nodes 3'   nodes that are Redis Clusters of S masters
#   make bench-go                  go test benchmarks with -benchmem
#   make bench-profile             CPU and allocation profiles of the hot path

BENCH_JSON ?= results/matrix.json
BENCH_FLAGS ?=
BENCH_GO ?= .
BENCH_PROFILE ?= Uncontended1/nodes=5/redlock$$

.PHONY: bench bench-go bench-profile

bench: deps
	cd bench && $(GO) run ./cmd/redlock-bench -json $(BENCH_JSON) $(BENCH_FLAGS)

bench-go: deps
	cd bench && $(GO) test -run '^$$' -bench '$(BENCH_GO)' -benchmem -count 1 -timeout 60m

# Two runs: with -memprofilerate 1 every allocation records its stack, which
# took about two thirds of the CPU samples when both profiles came from one run.
bench-profile: deps
	mkdir -p bench/results
	cd bench && $(GO) test -run '^$$' -bench '$(BENCH_PROFILE)' -benchmem -benchtime 5s \
		-o results/bench.test -cpuprofile results/cpu.prof
	cd bench && $(GO) test -run '^$$' -bench '$(BENCH_PROFILE)' -benchmem -benchtime 5s \
		-o results/bench.test -memprofile results/mem.prof -memprofilerate 1
	@echo "go tool pprof -top bench/results/bench.test bench/results/cpu.prof   (and mem.prof, -sample_index=alloc_objects)"
