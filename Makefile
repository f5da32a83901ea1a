# The README's two first commands live here: `make demo` and `make test`.
# Every target installs what it needs first (scripts/install-deps.sh), so a
# fresh machine needs nothing done by hand.

GO ?= go
# Every module in the repo: the library at the root plus the nested ones
# (chaos/, bench/, cmd/redlock/) that keep heavy dependencies out of it.
MODULES := $(sort $(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*')))

.PHONY: deps test vet fmt-check demo

deps:
	@./scripts/install-deps.sh

vet:
	@set -e; for m in $(MODULES); do echo "== go vet $$m"; (cd $$m && $(GO) vet ./...); done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt would change:"; echo "$$out"; exit 1; }

# The chaos suite runs verbosely into a temporary log: CI shows which backend
# (docker or process) ran each scenario, and the whole log's tail on failure.
test: deps fmt-check vet
	@set -e; for m in $(filter-out ./chaos,$(MODULES)); do echo "== go test -race $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 30m ./...); done
	@log=$$(mktemp -t chaos-test.XXXXXX); rc=0; echo "== go test -race ./chaos (verbose log: $$log)"; \
		(cd chaos && $(GO) test -race -count=1 -timeout 30m -v ./... > $$log 2>&1) || rc=$$?; \
		grep -E 'backend=[a-z]+ scenario=|^(--- FAIL|FAIL|ok|panic:)' $$log | sed -E 's/^ +[a-z_]+_test.go:[0-9]+: //'; \
		if [ $$rc -ne 0 ]; then tail -n 150 $$log; exit $$rc; fi; rm -f $$log
	@$(MAKE) --no-print-directory model

# Nested modules add their own targets (demo, chaos, bench) in a make.mk beside them.
-include cmd/redlock/make.mk chaos/make.mk bench/make.mk model/make.mk
