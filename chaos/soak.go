package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// SoakConfig says what a soak runs.
type SoakConfig struct {
	// Backends to run on: "docker", "process", "auto" (docker when an
	// engine answers, else processes) or "both". Empty means auto.
	Backend string
	// Duration each scenario runs for, repeating its schedule. Zero runs
	// the short form (each schedule once).
	Duration time.Duration
	// Scenarios by name; empty runs the whole table.
	Scenarios []string
	// Parallel is how many scenarios run at once per backend (default 1:
	// the machine is shared, and timing noise is not what is measured).
	Parallel int
	// Log receives progress; nil discards.
	Log *slog.Logger
}

// Report is the outcome of a soak: one Run per scenario and backend.
type Report struct {
	Started  time.Time
	Elapsed  time.Duration
	Duration time.Duration // per scenario, as asked
	Runs     []*Run
	// Failed lists the runs that could not be carried out (a server did
	// not start, a fault could not be applied), with why.
	Failed []RunFailure
}

// RunFailure is a scenario run that ended in an error instead of a
// verdict.
type RunFailure struct {
	Scenario, Backend string
	Err               error
}

// Mismatches counts runs whose verdict differs from the expectation.
func (r *Report) Mismatches() int {
	n := 0
	for _, run := range r.Runs {
		if run.Mismatch != nil {
			n++
		}
	}
	return n
}

// OK reports whether every run was carried out and met its expectation.
func (r *Report) OK() bool { return len(r.Failed) == 0 && r.Mismatches() == 0 }

// RunSoak runs the chosen scenarios for cfg.Duration each and returns the
// report. Backends run side by side; the scenarios of one backend run in
// turn (or cfg.Parallel at a time). It returns an error only when nothing
// could be run (bad config, an asked-for backend missing) or ctx ended;
// failed runs and mismatched verdicts are in the report.
func RunSoak(ctx context.Context, cfg SoakConfig) (*Report, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Duration < 0 {
		return nil, fmt.Errorf("chaos: soak duration %s: must not be negative", cfg.Duration)
	}
	scenarios, err := pickScenarios(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	names, err := soakBackends(ctx, cfg.Backend)
	if err != nil {
		return nil, err
	}
	var backends []Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	for _, name := range names {
		b, err := OpenBackend(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("chaos: backend %s: %w", name, err)
		}
		backends = append(backends, b)
	}
	parallel := max(cfg.Parallel, 1)

	rep := &Report{Started: time.Now(), Duration: cfg.Duration}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range backends {
		sem := make(chan struct{}, parallel)
		for _, sc := range scenarios {
			wg.Go(func() {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				defer func() { <-sem }()
				run, err := RunScenario(ctx, b, sc, RunConfig{Duration: cfg.Duration, Log: log})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					log.Error("scenario could not run", "scenario", sc.Name, "backend", b.Name(), "err", err)
					rep.Failed = append(rep.Failed, RunFailure{Scenario: sc.Name, Backend: b.Name(), Err: err})
					return
				}
				rep.Runs = append(rep.Runs, run)
			})
		}
	}
	wg.Wait()
	rep.Elapsed = time.Since(rep.Started)
	rep.sort(scenarios)
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("chaos: soak interrupted: %w", err)
	}
	return rep, nil
}

// sort puts runs in table order, then by backend.
func (r *Report) sort(table []Scenario) {
	order := map[string]int{}
	for i, s := range table {
		order[s.Name] = i
	}
	key := func(scenario, backend string) string {
		return fmt.Sprintf("%04d/%s", order[scenario], backend)
	}
	sortBy(r.Runs, func(x *Run) string { return key(x.Scenario.Name, x.Backend) })
	sortBy(r.Failed, func(x RunFailure) string { return key(x.Scenario, x.Backend) })
}

func pickScenarios(names []string) ([]Scenario, error) {
	if len(names) == 0 {
		return Scenarios(), nil
	}
	var out []Scenario
	var errs []error
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		s, err := ScenarioByName(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("chaos: no scenario named in %q", names)
	}
	return out, nil
}

// soakBackends turns the Backend choice into backend names.
func soakBackends(ctx context.Context, choice string) ([]string, error) {
	switch strings.ToLower(strings.TrimSpace(choice)) {
	case "docker":
		return []string{"docker"}, nil
	case "process":
		return []string{"process"}, nil
	case "both":
		return []string{"process", "docker"}, nil
	case "", "auto":
		if DockerAvailable(ctx) {
			return []string{"docker"}, nil
		}
		return []string{"process"}, nil
	}
	return nil, fmt.Errorf("chaos: backend %q: want docker, process, auto or both", choice)
}
