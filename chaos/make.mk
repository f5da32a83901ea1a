# Chaos soak (included by the root Makefile; recipes run from the repo root).
#   make chaos                                    every scenario, 2m each, docker if it answers
#   make chaos CHAOS_DURATION=5m CHAOS_BACKEND=both
#   make chaos CHAOS_SCENARIOS=latency,client-pause CHAOS_DURATION=30s
CHAOS_DURATION ?= 2m
CHAOS_BACKEND ?= auto
CHAOS_SCENARIOS ?=
CHAOS_PARALLEL ?= 1
CHAOS_OUT ?= chaos/reports/$(shell date +%Y%m%d-%H%M%S)

# The scenarios of over 20 seconds that make test leaves out, on both
# backends: chaos_test.go's longScenarios and the scenarios on Redis Cluster
# nodes. CI runs this after make test. Docker is taken when its engine
# answers, as in make test.
SPLIT_ENV := REDLOCK_CHAOS_LONG
.PHONY: chaos-long
chaos-long: deps
	@echo "== go test -race ./chaos -run TestScenarios and TestRWScenarios, the long runs ($(SPLIT_ENV)=only)"
	@log=$$(mktemp -t chaos-long.XXXXXX); rc=0; \
		(cd chaos && $(SPLIT_ENV)=only $(GO) test -race -count=1 -timeout 30m -v -run '^(TestScenarios|TestRWScenarios)$$' . > $$log 2>&1) || rc=$$?; \
		grep -E 'backend=[a-z]+ scenario=|^ *--- FAIL|^(FAIL|ok|panic:)' $$log | sed -E 's/^ +[a-z_]+_test.go:[0-9]+: //'; \
		if [ $$rc -ne 0 ]; then awk '/_test.go:[0-9]+: [a-z0-9-]+ on (process|docker): /{n=40} n-->0' $$log; tail -n 150 $$log; exit $$rc; fi; rm -f $$log

.PHONY: chaos chaos-list
chaos: deps
	cd chaos && $(GO) run ./cmd/chaos-soak -duration '$(CHAOS_DURATION)' -backend '$(CHAOS_BACKEND)' \
		-scenarios '$(CHAOS_SCENARIOS)' -parallel '$(CHAOS_PARALLEL)' -out '$(abspath $(CHAOS_OUT))'

chaos-list:
	cd chaos && $(GO) run ./cmd/chaos-soak -list
