# The README's two first commands live here: `make demo` and `make test`.
# Every target installs what it needs first (tools/install-deps.sh), so a
# fresh machine needs nothing done by hand.

GO ?= go
# Every module in the repo: the library at the root plus the nested ones
# (chaos/, bench/, cmd/redlock/) that keep heavy dependencies out of it.
MODULES := $(sort $(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*')))

.PHONY: deps servers test test-matrix test-matrix-root test-matrix-chaos vet fmt-check demo

deps:
	@./tools/install-deps.sh

# Redis 8.6 and Valkey 9.1 for the test matrix, beside the system's Redis 7.0,
# in ${REDLOCK_SERVERS_DIR:-$HOME/.cache/redlock/servers}/{redis-8.6,valkey-9.1}/bin/
# (tools/install-servers.sh says how; it changes nothing on the system).
servers:
	@./tools/install-servers.sh

vet:
	@set -e; for m in $(MODULES); do echo "== go vet $$m"; (cd $$m && $(GO) vet ./...); done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt would change:"; echo "$$out"; exit 1; }

# The chaos suite runs verbosely into a temporary log: CI shows which backend
# (docker or process) ran each scenario, and the whole log's tail on failure.
# The library's tests run beside the nested modules' (most of their time is
# spent waiting on servers, and 2 cores are enough for both): the log of
# the library's run is printed when both are done. The chaos scenarios of
# over 20 seconds, and those on Redis Cluster nodes, run in chaos-long
# (chaos/make.mk) on both backends.
test: deps servers fmt-check vet
	@rootlog=$$(mktemp -t redlock-test.XXXXXX); \
		($(GO) test -race -count=1 -timeout 30m -bench . -benchtime 1x ./... > $$rootlog 2>&1; echo $$? >> $$rootlog) & \
		rc=0; for m in $(filter-out . ./chaos,$(MODULES)); do echo "== go test -race $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 30m ./...) || rc=1; done; \
		wait; echo "== go test -race . (run beside the nested modules)"; sed '$$d' $$rootlog; \
		[ "$$(tail -n 1 $$rootlog)" = 0 ] || rc=1; rm -f $$rootlog; exit $$rc
	@# The chaos suite mostly waits on servers and timers, the SPIN rows are
	@# CPU work on one core: side by side, for time (the suite must pass with
	@# a CPU-bound process beside it anyway).
	@log=$$(mktemp -t chaos-test.XXXXXX); mlog=$$(mktemp -t model-test.XXXXXX); rc=0; \
		(JOBS=1 $(MAKE) --no-print-directory model > $$mlog 2>&1; echo $$? >> $$mlog) & \
		echo "== go test -race ./chaos (verbose log: $$log), beside the quick SPIN rows"; \
		(cd chaos && $(SPLIT_ENV)=later $(GO) test -race -count=1 -timeout 30m -v ./... > $$log 2>&1) || rc=$$?; \
		grep -E 'backend=[a-z]+ scenario=|SKIPPED ON [A-Z]+ HERE|^ *--- FAIL|^(FAIL|ok|panic:)' $$log | sed -E 's/^ +[a-z_]+_test.go:[0-9]+: //'; \
		if [ $$rc -ne 0 ]; then awk '/_test.go:[0-9]+: [a-z0-9-]+ on (process|docker): /{n=40} n-->0' $$log; tail -n 150 $$log; fi; \
		wait; sed '$$d' $$mlog; [ "$$(tail -n 1 $$mlog)" = 0 ] || rc=1; \
		rm -f $$mlog; [ $$rc -ne 0 ] || rm -f $$log; exit $$rc

# The server matrix: the root module's real-server tests and a subset of the
# chaos scenarios on Redis 8.6 and Valkey 9.1, beside make test's runs on the
# system's Redis 7.0 (which runs every scenario, with make chaos-long). CI
# runs it after make test. redistest and the chaos backends run the build
# that REDLOCK_TEST_SERVER names; a build asked for and missing fails.
# The two root-module runs go side by side, as make test runs the library
# beside the nested modules: most of their time is spent waiting on servers.
MATRIX_SERVERS ?= redis-8.6 valkey-9.1
# A representative, time-bounded subset of the chaos scenarios, each
# verdict kind and each node kind: safe ones under every fault family
# (network, pause, restart, clock, failover, Cluster nodes; mutex,
# semaphore, rw and fair locks) and the unsafe-by-design ones, whose
# violations must still show, plus the baselines. On processes; the Docker
# backend runs a few of them too, to show the image of each server works.
# restart-fsynced (everysec nodes with WAITAOF, FsyncedVotes) needs a
# WAITAOF that FsyncedVotes trusts (Redis 8.0+): it runs here on both
# backends with redis-8.6; the valkey-9.1 and make test's Redis 7.0 runs
# skip it, saying so.
MATRIX_CHAOS ?= no-faults|partition-majority|node-pause|client-pause|restart-aof|restart-fsynced|restart-empty-grace|restart-empty-no-grace|clock-jump-guard|clock-jump-no-guard|clock-fast|failover-majority-durable|failover-majority-not-durable|cluster-shard-restart-empty|cluster-shard-restart-empty-no-grace|semaphore-rotating-partitions|semaphore-restart-empty-no-grace|fair-node-pause|rw-partition-flapping|rw-restart-empty-no-grace|baseline-setnx-del|baseline-failover
MATRIX_CHAOS_DOCKER ?= node-pause|restart-empty-no-grace|clock-jump-no-guard|restart-fsynced
# Both halves run even when the first fails, so one run shows every verdict.
test-matrix: deps servers
	@rc=0; $(MAKE) --no-print-directory test-matrix-root || rc=1; \
		$(MAKE) --no-print-directory test-matrix-chaos || rc=1; exit $$rc

test-matrix-root: deps servers
	@rc=0; logs=""; for s in $(MATRIX_SERVERS); do \
		log=$$(mktemp -t redlock-matrix-$$s.XXXXXX); logs="$$logs $$s=$$log"; \
		(start=$$(date +%s); REDLOCK_TEST_SERVER=$$s $(GO) test -race -count=1 -timeout 30m ./... > $$log 2>&1; \
			echo "$$? $$(( $$(date +%s) - start ))" >> $$log) & \
	done; wait; \
	for sl in $$logs; do s=$${sl%%=*}; log=$${sl#*=}; set -- $$(tail -n 1 $$log); \
		echo "== go test -race . on $$s: $$([ $$1 = 0 ] && echo pass || echo FAIL) in $$2s"; \
		sed '$$d' $$log | grep -E '^(--- FAIL|FAIL|ok|panic:)|redistest: the servers are' | sort -u; \
		if [ $$1 != 0 ]; then rc=1; sed '$$d' $$log | tail -n 150; fi; rm -f $$log; done; exit $$rc

# The servers run side by side (each mostly waits on timers), each server's
# backends one after the other; each server's log is printed when both are done.
test-matrix-chaos: deps servers
	@rc=0; logs=""; for s in $(MATRIX_SERVERS); do \
		out=$$(mktemp -t redlock-matrix-chaos-$$s.XXXXXX); logs="$$logs $$out"; \
		(for b in process docker; do \
			pick='$(MATRIX_CHAOS)'; [ $$b = docker ] && pick='$(MATRIX_CHAOS_DOCKER)'; \
			log=$$(mktemp -t redlock-matrix-chaos.XXXXXX); start=$$(date +%s); r=0; \
			(cd chaos && REDLOCK_TEST_SERVER=$$s REDLOCK_CHAOS_BACKEND=$$b $(GO) test -race -count=1 -timeout 30m -v \
				-run "^(TestScenarios|TestRWScenarios)\$$/^$$b\$$/^($$pick)\$$" . > $$log 2>&1) || r=$$?; \
			echo "== chaos on $$s, $$b backend: $$([ $$r = 0 ] && echo pass || echo FAIL) in $$(( $$(date +%s) - start ))s"; \
			grep -E 'backend=[a-z]+ scenario=|^ *--- FAIL|^(FAIL|ok|panic:)' $$log | sed -E 's/^ +[a-z_]+_test.go:[0-9]+: //'; \
			if [ $$r != 0 ]; then echo "matrix-chaos-failed"; awk '/_test.go:[0-9]+: [a-z0-9-]+ on (process|docker): /{n=40} n-->0' $$log; tail -n 150 $$log; fi; rm -f $$log; done) > $$out 2>&1 & \
	done; wait; \
	for out in $$logs; do cat $$out; grep -q '^matrix-chaos-failed$$' $$out && rc=1; rm -f $$out; done; exit $$rc

# Nested modules add their own targets (demo, chaos, bench) in a make.mk beside them.
-include cmd/redlock/make.mk chaos/make.mk bench/make.mk model/make.mk
