# The README's two first commands live here: `make demo` and `make test`.
# Every target installs what it needs first (tools/install-deps.sh), so a
# fresh machine needs nothing done by hand.

GO ?= go
# Every module in the repo: the library at the root plus the nested ones
# (chaos/, bench/, cmd/redlock/) that keep heavy dependencies out of it.
MODULES := $(sort $(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*')))

.PHONY: deps servers test vet fmt-check demo

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
# the library's run is printed when both are done. The long chaos scenarios
# run on processes here and on Docker in chaos-long (chaos/make.mk), with the
# scenarios on Redis Cluster nodes (both backends).
test: deps fmt-check vet
	@rootlog=$$(mktemp -t redlock-test.XXXXXX); \
		($(GO) test -race -count=1 -timeout 30m ./... > $$rootlog 2>&1; echo $$? >> $$rootlog) & \
		rc=0; for m in $(filter-out . ./chaos,$(MODULES)); do echo "== go test -race $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 30m ./...) || rc=1; done; \
		wait; echo "== go test -race . (run beside the nested modules)"; sed '$$d' $$rootlog; \
		[ "$$(tail -n 1 $$rootlog)" = 0 ] || rc=1; rm -f $$rootlog; exit $$rc
	@log=$$(mktemp -t chaos-test.XXXXXX); rc=0; echo "== go test -race ./chaos (verbose log: $$log)"; \
		(cd chaos && $(SPLIT_ENV)=later $(GO) test -race -count=1 -timeout 30m -v ./... > $$log 2>&1) || rc=$$?; \
		grep -E 'backend=[a-z]+ scenario=|SKIPPED ON [A-Z]+ HERE|^(--- FAIL|FAIL|ok|panic:)' $$log | sed -E 's/^ +[a-z_]+_test.go:[0-9]+: //'; \
		if [ $$rc -ne 0 ]; then tail -n 150 $$log; exit $$rc; fi; rm -f $$log
	@$(MAKE) --no-print-directory model

# Nested modules add their own targets (demo, chaos, bench) in a make.mk beside them.
-include cmd/redlock/make.mk chaos/make.mk bench/make.mk model/make.mk
