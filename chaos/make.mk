# Chaos soak (included by the root Makefile; recipes run from the repo root).
#   make chaos                                    every scenario, 2m each, docker if it answers
#   make chaos CHAOS_DURATION=5m CHAOS_BACKEND=both
#   make chaos CHAOS_SCENARIOS=latency,client-pause CHAOS_DURATION=30s
CHAOS_DURATION ?= 2m
CHAOS_BACKEND ?= auto
CHAOS_SCENARIOS ?=
CHAOS_PARALLEL ?= 1
CHAOS_OUT ?= chaos/reports/$(shell date +%Y%m%d-%H%M%S)

.PHONY: chaos chaos-list
chaos: deps
	cd chaos && $(GO) run ./cmd/chaos-soak -duration '$(CHAOS_DURATION)' -backend '$(CHAOS_BACKEND)' \
		-scenarios '$(CHAOS_SCENARIOS)' -parallel '$(CHAOS_PARALLEL)' -out '$(abspath $(CHAOS_OUT))'

chaos-list:
	cd chaos && $(GO) run ./cmd/chaos-soak -list
