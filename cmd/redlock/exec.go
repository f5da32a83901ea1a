package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlabs/redlock"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

var execHelp = cmdHelp{
	name:     "exec",
	synopsis: "NAME -- COMMAND [ARGS...]",
	about: `Acquire the lock NAME on a quorum of the nodes, run COMMAND while holding it, then release it.
The lock is extended in the background for as long as COMMAND runs.

COMMAND finds the lock's fencing token in REDLOCK_TOKEN (and the name in REDLOCK_NAME). Tokens
grow with every acquisition of NAME, whoever acquires it: send the token along with every write
to the resource the lock protects and let the resource refuse tokens lower than the highest it
has seen. Without that check, a holder that stalled and lost the lock can still write.

If the lock is lost while COMMAND runs (nodes unreachable, keys deleted by an operator, TTL
passed), COMMAND and every process it started get SIGTERM, then SIGKILL after --grace, and
redlock exits 76. COMMAND runs in its own process group; SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 sent to redlock are passed on to it. It is not meant for interactive
commands: when stdin is a terminal, COMMAND reads end-of-file from it.

With --wait 0 (the default) redlock makes a single attempt and exits 75 if the lock is taken:
what a cron job that must run on one host only wants. 75 means the nodes that answered "held
by another owner" are alone enough to make a quorum impossible (more than N - quorum of them),
whatever the other nodes did: 4 of 5 held and the 5th down is 75. It exits 69 instead when the
failed nodes were needed to lose (2 of 5 held and 3 down), no quorum of the nodes could be
reached, or a node cannot take the lock (a replica, a server listed twice, a node in cluster
mode that does not serve the lock's hash slot): then nobody can be said to hold the lock, and
the job ran nowhere. Either message names every node that failed.

While it holds the lock, redlock records this host's name, its own pid, the start time and
COMMAND with it (on every node, in a key that goes with the lock): ` + "`redlock status NAME`" + ` shows
them. --no-metadata records nothing, for a command line that carries secrets.

With --permits K, NAME is a semaphore of K permits instead of a lock: up to K commands run at
once under NAME, each under a permit of its own with its own token (tokens grow per slot; the
command finds its slot, 0 to K-1, in REDLOCK_SLOT). Exit 75 then means that all K permits are
held by others. Every run of NAME must give the same K: the nodes record K while a permit is
held, and refuse another K with exit 64, at once, whatever --wait.

Flags go before NAME, or between NAME and "--". NAME and COMMAND are always separated by
"--", so that a forgotten NAME ("exec -- make deploy") is an error instead of a lock named
"make".

` + exitCodesHelp,
	examples: `
redlock exec nightly-report -- ./report.sh --since yesterday
redlock exec --wait 2m --ttl 30s deploy -- make deploy
REDLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 redlock exec billing -- sh -c 'bill --fence "$REDLOCK_TOKEN"'
redlock exec nightly-report -- ./report.sh || [ $? -eq 75 ]   # another host has it: fine
redlock exec --permits 4 --wait 10m encoder -- ./encode.sh   # at most 4 encoders at once`,
}

// splitNameAndCommand takes NAME -- COMMAND [ARGS...] from what follows the flags (rest, the
// tail of args). The "--" is required: without it, "exec -- make deploy" or "exec make deploy"
// would run "deploy" under a lock named "make".
func splitNameAndCommand(args, rest []string) (string, []string, error) {
	const want = `want "redlock exec [flags] NAME -- COMMAND [ARGS...]"`
	if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
		// The flag parser ate a "--" right before rest: nothing stood between the flags
		// and the command.
		return "", nil, usagef("missing lock NAME before \"--\": %s", want)
	}
	if len(rest) == 0 {
		return "", nil, usagef("missing lock NAME and COMMAND: %s", want)
	}
	name := rest[0]
	if len(rest) == 1 {
		return "", nil, usagef("missing \"--\" and COMMAND after the lock name %q: %s", name, want)
	}
	if rest[1] != "--" {
		return "", nil, usagef("missing \"--\" between the lock name %q and the command %q: %s", name, rest[1], want)
	}
	if len(rest) == 2 {
		return "", nil, usagef("missing COMMAND after \"--\": %s", want)
	}
	return name, rest[2:], nil
}

// flagsAfterName parses the flags written between NAME and "--" ("exec job --wait 1s -- cmd"):
// everything there can only be a flag, as COMMAND starts after "--". It returns NAME and what
// follows from "--" on; without a "--" it leaves rest to splitNameAndCommand, which says what
// is missing.
func flagsAfterName(fs *flag.FlagSet, rest []string) ([]string, error) {
	if len(rest) < 2 || rest[1] == "--" || !strings.HasPrefix(rest[1], "-") {
		return rest, nil
	}
	sep := slices.Index(rest, "--")
	if sep < 0 {
		return nil, usagef("%q after the lock name %q looks like a flag, but no \"--\" says where COMMAND starts: want \"redlock exec [flags] NAME [flags] -- COMMAND [ARGS...]\"", rest[1], rest[0])
	}
	left, err := parseLeadingFlags(fs, rest[1:sep])
	if err != nil {
		return nil, err
	}
	if len(left) > 0 {
		return nil, usagef("%q between the lock name %q and \"--\" is not a flag: want \"redlock exec [flags] NAME [flags] -- COMMAND [ARGS...]\"", left[0], rest[0])
	}
	return append([]string{rest[0]}, rest[sep:]...), nil
}

// forwardedSignals reach COMMAND through redlock. SIGINT, SIGTERM, SIGHUP and SIGQUIT also
// abandon the wait when they arrive before COMMAND starts.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// releaseTimeout bounds the release after COMMAND ends: the nodes may be unreachable, and the
// keys expire by themselves within the TTL anyway.
const releaseTimeout = 5 * time.Second

// verboseProbeTimeout bounds the node probe exec -v makes before acquiring.
const verboseProbeTimeout = 2 * time.Second

func runExec(ctx context.Context, a *app, args []string) error {
	var nf ttlNodeFlags
	fs := newFlagSet(a, execHelp)
	nf.register(fs, "lock `TTL`; extended while COMMAND runs, it bounds how long a crashed redlock keeps others out")
	wait := fs.Duration("wait", 0, "how long to wait for the lock; 0 makes a single attempt")
	killGrace := fs.Duration("grace", 5*time.Second, "after the lock is lost, how long COMMAND has between SIGTERM and SIGKILL")
	withOTel := fs.Bool("otel", false, otelFlagUsage)
	noMetadata := fs.Bool("no-metadata", false, "do not record host, pid, start time and COMMAND with the lock (shown by redlock status)")
	permits := fs.Int("permits", 0, "run under one of `K` permits of the semaphore NAME instead of the lock NAME; 0: the lock")
	rest, err := parseLeadingFlags(fs, args)
	if err != nil {
		return err
	}
	if rest, err = flagsAfterName(fs, rest); err != nil {
		return err
	}
	name, argv, err := splitNameAndCommand(args, rest)
	if err != nil {
		return err
	}
	if err := positiveDuration("ttl", nf.ttl); err != nil {
		return err
	}
	if *wait < 0 {
		return usagef("--wait must be 0 (one attempt) or positive, got %v", *wait)
	}
	if *killGrace < 0 {
		return usagef("--grace must be 0 (SIGKILL at once) or positive, got %v", *killGrace)
	}
	if *permits < 0 {
		return usagef("--permits must be 0 (a lock) or positive, got %d", *permits)
	}

	opts := nf.options(a)
	if *withOTel {
		obs, shutdown, err := startOTel(ctx, a)
		if err != nil {
			return err
		}
		// Deferred before the client's Close: the last events are exported.
		defer func() {
			if err := shutdown(); err != nil {
				fmt.Fprintf(a.stderr, "redlock exec: warning: telemetry: %v\n", err)
			}
		}()
		addObserver(&opts, obs)
	}
	status := &waitStatus{}
	addObserver(&opts, status)
	client, err := nf.connect(a, opts)
	if err != nil {
		return err
	}
	defer client.Close()
	if nf.grace.d == redlock.NoRestartGrace {
		// Off is safe only on nodes that persist every write and never fail over,
		// evict or get flushed: name those that do not persist.
		probeCtx, cancel := context.WithTimeout(ctx, verboseProbeTimeout)
		for _, w := range persistenceWarnings(client.Nodes(probeCtx), nf.grace.d, nf.ttl) {
			fmt.Fprintf(a.stderr, "redlock exec: %s\n", w)
		}
		cancel()
	}
	if nf.verbose {
		// A lock won on a quorum says nothing of the nodes that failed: with -v, probe
		// them first so that a node refusing authentication, say, shows up even then.
		probeCtx, cancel := context.WithTimeout(ctx, verboseProbeTimeout)
		for _, n := range client.Nodes(probeCtx) {
			nf.logNodeError(a, n.Node, n.Err)
		}
		cancel()
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	var sem *redlock.Semaphore
	if *permits > 0 {
		if sem, err = client.Semaphore(name, *permits); err != nil {
			return withExitCode(exitUsage, err)
		}
	}
	lockOpts := []redlock.LockOption{redlock.WithTTL(nf.ttl), redlock.WithAutoExtend()}
	if !*noMetadata && sem == nil { // a semaphore's permits have no holder key (WithMetadata)
		lockOpts = append(lockOpts, redlock.WithMetadata(holderMetadata(argv, time.Now())))
	}
	lock, stopLock, err := acquireForExec(ctx, a, client, sem, name, lockOpts, *wait, nf.verbose, sigs, status)
	if err != nil {
		return err
	}
	defer stopLock()
	releaseCtx := context.WithoutCancel(ctx)

	env := append(os.Environ(), "REDLOCK_TOKEN="+strconv.FormatInt(lock.Token(), 10), "REDLOCK_NAME="+name)
	if sem != nil {
		env = append(env, "REDLOCK_SLOT="+strconv.Itoa(lock.slot))
	}
	stdin := a.stdin
	if term.IsTerminal(int(stdin.Fd())) {
		// In its own process group the command is in the terminal's background: reading
		// the terminal would stop it (SIGTTIN) while redlock keeps the lock alive forever.
		// It reads end-of-file instead.
		stdin = nil
	}
	child, err := startSupervised(argv, env, stdin, a.stdout, a.stderr)
	if err != nil {
		_ = release(releaseCtx, lock.Lock)
		return withExitCode(startErrorCode(err), fmt.Errorf("cannot run %q: %w", argv[0], err))
	}

	lostErr := superviseUntilExit(a, child, lock.Lock, *killGrace, sigs)
	if lostErr == nil && child.exitedAt.After(lock.Deadline()) {
		// The loss was not signalled yet, but the validity had passed before COMMAND ended:
		// for its last moments COMMAND was not protected.
		lostErr = fmt.Errorf("the lock's validity ended before the command did: %w", redlock.ErrLockLost)
	}
	releaseErr := release(releaseCtx, lock.Lock)
	if lostErr != nil {
		return withExitCode(exitLockLost, fmt.Errorf("lock %q lost while the command ran (%v); its work may overlap another holder's (command exit code %d)", name, lostErr, child.exitCode()))
	}
	if releaseErr != nil {
		// COMMAND ended within the lock's validity, so it was protected; the keys expire by
		// themselves if they are still there.
		fmt.Fprintf(a.stderr, "redlock exec: warning: releasing lock %q: %v\n", name, releaseErr)
	}
	if child.groupAlive() {
		fmt.Fprintf(a.stderr, "redlock exec: warning: processes started by %q still run (process group %d) and are no longer protected by the lock\n", argv[0], child.pgid)
	}
	if code := child.exitCode(); code != 0 {
		return &silentExit{code}
	}
	return nil
}

// heldLock is what exec holds: a lock, or a semaphore's permit (a lock on one slot).
type heldLock struct {
	*redlock.Lock
	slot int
}

// takeLock takes the lock, or a permit of sem if it is set: in one attempt,
// or waiting (for as long as opts allow) if wait.
func takeLock(ctx context.Context, client *redlock.Client, sem *redlock.Semaphore, name string, opts []redlock.LockOption, wait bool) (heldLock, error) {
	if sem == nil {
		take := client.TryAcquire
		if wait {
			take = client.Acquire
		}
		l, err := take(ctx, name, opts...)
		return heldLock{Lock: l}, err
	}
	take := sem.TryAcquire
	if wait {
		take = sem.Acquire
	}
	p, err := take(ctx, opts...)
	return permitHeld(p), err
}

func permitHeld(p *redlock.Permit) heldLock {
	if p == nil {
		return heldLock{}
	}
	return heldLock{Lock: p.Lock, slot: p.Slot()}
}

// acquireForExec gets the lock, with auto-extension, making one attempt when wait is 0. An
// interrupt while waiting abandons the wait and exits 128+N. The context the lock was
// acquired with is cancelled only by the returned function, to be called once the lock is
// released: the library does not promise that a lock outlives it.
func acquireForExec(ctx context.Context, a *app, client *redlock.Client, sem *redlock.Semaphore, name string, lockOpts []redlock.LockOption, wait time.Duration, verbose bool, sigs <-chan os.Signal, status *waitStatus) (heldLock, context.CancelFunc, error) {
	acquireCtx, abandon := context.WithCancel(ctx)
	type result struct {
		lock heldLock
		err  error
	}
	results := make(chan result, 1)
	go func() {
		var r result
		r.lock, r.err = takeLock(acquireCtx, client, sem, name, lockOpts, false)
		if r.err != nil && wait > 0 && retryable(r.err) {
			if verbose {
				fmt.Fprintf(a.stderr, "redlock exec: waiting up to %v for lock %q: %v\n", wait, name, r.err)
			}
			// On a terminal, a status line says what the wait is for and how long it has
			// left; in a pipe nothing is shown until the outcome.
			stop, shown := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(shown)
				status.show(newProgress(a.stderr), name, time.Now().Add(wait), stop)
			}()
			r.lock, r.err = takeLock(acquireCtx, client, sem, name, append(lockOpts, redlock.WithMaxWait(wait)), true)
			close(stop)
			<-shown
		}
		results <- r
	}()
	var interrupted os.Signal
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGUSR1, syscall.SIGUSR2:
				// Meant for COMMAND, which is not running yet.
			default:
				if interrupted == nil {
					interrupted = sig
					abandon()
				}
			}
		case r := <-results:
			switch {
			case interrupted != nil:
				if r.lock.Lock != nil {
					// Won just as the interrupt came: give it back at once.
					_ = release(context.WithoutCancel(ctx), r.lock.Lock)
				}
				abandon()
				return heldLock{}, nil, withExitCode(signalExitCode(interrupted), fmt.Errorf("interrupted by %s while waiting for lock %q", signalName(interrupted), name))
			case r.err == nil:
				return r.lock, abandon, nil
			case errors.Is(r.err, redlock.ErrInvalidConfig) && !errors.Is(r.err, redlock.ErrNotIndependent) && !errors.Is(r.err, redlock.ErrSlotNotServed):
				// A replica, a server listed twice or a cluster node not serving the lock's
				// slot also matches ErrInvalidConfig, but it is found on the nodes, not in
				// the command line: 69 below, like a node down.
				abandon()
				return heldLock{}, nil, withExitCode(exitUsage, failoverHint(r.err))
			default:
				abandon()
				how := "in one attempt (--wait 0)"
				if wait > 0 {
					how = "within " + wait.String()
				}
				return heldLock{}, nil, withExitCode(notAcquiredCode(r.err), fmt.Errorf("lock %q not acquired %s: %w", name, how, r.err))
			}
		}
	}
}

// signalName gives a signal's conventional name ("SIGINT"), not Go's description ("interrupt").
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			return name
		}
	}
	return sig.String()
}

// notAcquiredCode tells a busy lock (75: another owner has it, the job runs elsewhere) from a
// lock service that is down (69: no quorum of the nodes could be reached, so nobody can hold
// it). A script that treats 75 as "fine, another host has it" must not skip its job because
// the nodes are down.
func notAcquiredCode(err error) int {
	var locked *redlock.LockedError
	if errors.As(err, &locked) {
		return exitNotAcquired
	}
	return exitUnavailable
}

// retryable tells whether waiting may help: the lock is held, or too few nodes said yes.
func retryable(err error) bool {
	return errors.Is(err, redlock.ErrLocked) || errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, redlock.ErrValidityTooShort)
}

// superviseUntilExit passes signals on to the command until it exits. If the lock is lost
// first, the command's group gets SIGTERM, then SIGKILL after grace; the error returned then
// says why the lock was lost.
func superviseUntilExit(a *app, child *supervised, lock *redlock.Lock, grace time.Duration, sigs <-chan os.Signal) error {
	var lostErr error
	var killNow <-chan time.Time
	lockDone := lock.Done()
	for {
		select {
		case <-child.exited:
			if lostErr != nil && killNow != nil {
				killStragglers(child, killNow)
			}
			return lostErr
		case sig := <-sigs:
			if err := child.signalGroup(sig.(syscall.Signal)); err != nil {
				fmt.Fprintf(a.stderr, "redlock exec: cannot pass %v on to the command: %v\n", sig, err)
			}
		case <-lockDone:
			// Nothing else releases the lock while the command runs, so Done means lost.
			lockDone = nil
			lostErr = lock.Err()
			if lostErr == nil {
				lostErr = redlock.ErrLockLost
			}
			fmt.Fprintf(a.stderr, "redlock exec: lock %q lost (%v): sending SIGTERM to the command, SIGKILL in %v\n", lock.Name(), lostErr, grace)
			_ = child.signalGroup(syscall.SIGTERM)
			killNow = time.After(grace)
		case <-killNow:
			killNow = nil
			fmt.Fprintf(a.stderr, "redlock exec: the command outlived --grace: sending SIGKILL\n")
			_ = child.signalGroup(syscall.SIGKILL)
		}
	}
}

// killStragglers handles processes the command left in its group after a lock loss: they get
// the rest of the grace period, then SIGKILL. No process keeps working without the lock.
func killStragglers(child *supervised, killNow <-chan time.Time) {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for child.groupAlive() {
		select {
		case <-killNow:
			_ = child.signalGroup(syscall.SIGKILL)
			return
		case <-poll.C:
		}
	}
}

// release gives the lock back after the command ended, within releaseTimeout.
func release(ctx context.Context, lock *redlock.Lock) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	return lock.Release(ctx)
}
