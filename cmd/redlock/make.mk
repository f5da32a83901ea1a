# Targets of the redlock CLI, included by the root Makefile and run from the repo root.

.PHONY: redlock demo

# bin/redlock: the CLI, built from its own module (cmd/redlock).
redlock:
	cd cmd/redlock && $(GO) build -o ../../bin/redlock .

# The README's first command: installs redis-server if missing, then runs the demo.
# DEMO_FLAGS passes flags on, e.g. make demo DEMO_FLAGS="--duration 1m".
demo: deps redlock
	./bin/redlock demo $(DEMO_FLAGS)
