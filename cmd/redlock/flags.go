package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
)

// cmdHelp is what `redlock <command> --help` prints around the flag list.
type cmdHelp struct {
	name     string // subcommand
	synopsis string // arguments after the flags, e.g. "NAME -- COMMAND [ARGS...]"
	about    string // what it does, in a few lines
	examples string // shell lines, one per line
}

// newFlagSet returns a flag set that reports errors to the caller instead of printing them,
// and prints the help (with examples) on stdout for -h/--help.
func newFlagSet(a *app, h cmdHelp) *flag.FlagSet {
	fs := flag.NewFlagSet(h.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { printHelp(a.stdout, fs, h) }
	return fs
}

func printHelp(w io.Writer, fs *flag.FlagSet, h cmdHelp) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", strings.TrimSpace("redlock "+h.name+" [flags] "+h.synopsis), strings.TrimSpace(h.about))
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace("--"+f.Name+" "+kind)) // a bool flag has no kind
		fmt.Fprintf(w, "        %s", usage)
		// A zero default says nothing, and a usage that explains its own default
		// ("default min(200ms, TTL/10)") must not get a second one ("default 0s").
		if !isZeroDefault(f.DefValue) && !strings.Contains(usage, "(default") {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintf(w, "\nExamples:\n")
	for _, line := range strings.Split(strings.TrimSpace(h.examples), "\n") {
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace(line))
	}
}

func isZeroDefault(v string) bool {
	switch v {
	case "", "false", "0", "0s":
		return true
	}
	return false
}

// parseLeadingFlags parses the flags before the first positional argument and returns the
// rest untouched (exec: what follows NAME belongs to the command). -h/--help prints the help
// once and returns flag.ErrHelp; a bad flag gives a one-line error, not the whole help.
func parseLeadingFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package prints the usage itself on -h and on every error: silence it while
	// parsing, and print the help once here when it was asked for.
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return nil, err
		}
		return nil, &usageError{flagErrorMessage(fs, err)}
	}
	return fs.Args(), nil
}

// flagError matches the errors of the flag package that name a flag and a value.
var (
	flagBadValue  = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNeedsArg  = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

func isDurationValue(g flag.Getter) bool {
	_, ok := g.Get().(time.Duration)
	return ok
}

// flagErrorMessage rewrites a flag package error in this command's words: flags spelled
// --name as the help shows them, and for a duration written as a bare number, how to write it.
func flagErrorMessage(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		value, name, reason := m[1], m[2], m[3]
		if f := fs.Lookup(name); f != nil {
			// Only the flag package's own values are Getters; --restart-grace is not.
			if g, ok := f.Value.(flag.Getter); ok && isDurationValue(g) {
				if _, numErr := strconv.ParseFloat(value, 64); numErr == nil {
					return fmt.Sprintf("--%s %s: a duration needs a unit: write %ss (or ms, m, h)", name, value, value)
				}
				return fmt.Sprintf("--%s %q: not a duration: write e.g. 500ms, 10s, 2m", name, value)
			}
		}
		return fmt.Sprintf("--%s %q: %s", name, value, reason)
	}
	if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown flag --%s", m[1])
	}
	if m := flagNeedsArg.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s needs a value", m[1])
	}
	return msg
}

// parseFlags parses args and returns the positional arguments. Flags may come before or
// after positional arguments ("status NAME --nodes ..."); everything after "--" is positional.
// -h/--help prints the help and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		rest, err := parseLeadingFlags(fs, args)
		if err != nil {
			return nil, err
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// nodeFlags are the flags every command that talks to the nodes shares.
type nodeFlags struct {
	nodes       string
	tls         tlsFlags
	keyPrefix   string
	nodeTimeout time.Duration
	verbose     bool
	// allowFailover accepts nodes that fail over by themselves (Sentinel
	// masters, Cluster masters with replicas): Options.AllowFailoverNodes.
	allowFailover bool
	// durableVotes makes every vote wait for the master's replicas: Options.DurableVotes.
	durableVotes bool
	// allowEvicting accepts nodes that may evict keys: Options.AllowEvictingNodes.
	allowEvicting bool
	log           *slog.Logger // the -v logger, made on first use
}

func (nf *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&nf.nodes, "nodes", "", "comma-separated `URLs` of the independent nodes: a master redis://[user:pass@]host:port[/db], a Redis Cluster redis+cluster://host:port?addr=host2:port2, a Sentinel master redis+sentinel://host:26379?master_name=NAME&addr=host2:26379; rediss for TLS (default $REDLOCK_NODES)")
	fs.StringVar(&nf.keyPrefix, "key-prefix", "redlock:", "`prefix` of the lock keys; must match the one your applications use")
	fs.DurationVar(&nf.nodeTimeout, "node-timeout", 0, "per-node call `timeout` (default min(200ms, TTL/10))")
	fs.BoolVar(&nf.verbose, "v", false, "log the client's decisions and every node problem to stderr")
	fs.BoolVar(&nf.durableVotes, "durable-votes", false, "count a node's vote only once its master's replicas acknowledged it (WAIT), so that a promoted replica holds every counted vote (a promoted master still sits out the restart grace); accepts nodes with replicas")
	fs.BoolVar(&nf.allowFailover, "allow-failover-nodes", false, "accept nodes that fail over by themselves (Sentinel masters, masters with replicas) without durable votes: a failover during a hold loses that node's vote, so count each such node as one that may lose its keys")
	fs.BoolVar(&nf.allowEvicting, "allow-evicting-nodes", false, "accept nodes that may evict keys (maxmemory with a policy other than noeviction); needs --restart-grace of at least the largest TTL in use: a node that evicted sits out the restart grace, but an eviction within about a second before another client's acquire is not seen")
	nf.tls.register(fs)
}

// urls returns the node URLs from --nodes or REDLOCK_NODES, each checked, with an error
// that names the bad entry (password redacted) and where it came from.
func (nf *nodeFlags) urls(a *app) ([]string, error) {
	source, list := "--nodes", nf.nodes
	if list == "" {
		source, list = "REDLOCK_NODES", a.getenv("REDLOCK_NODES")
	}
	if strings.TrimSpace(list) == "" {
		return nil, usagef("no nodes: pass --nodes URL,URL,... or set REDLOCK_NODES")
	}
	var urls []string
	for _, raw := range strings.Split(list, ",") {
		if raw = strings.TrimSpace(raw); raw != "" {
			urls = append(urls, raw)
		}
	}
	for i, raw := range urls {
		if _, err := redlock.ParseNodeURL(raw); err != nil {
			return nil, withExitCode(exitUsage, fmt.Errorf("%s: node %d of %d (%s): %w", source, i+1, len(urls), redlock.RedactURL(raw), err))
		}
	}
	return urls, nil
}

// options returns the client options these flags describe, for a lock TTL of ttl. With -v
// the client's own log, its events (each attempt's outcome with every node's error) and
// go-redis' log lines go to stderr through one slog logger.
func (nf *nodeFlags) options(a *app, ttl time.Duration) redlock.Options {
	opts := redlock.Options{TTL: ttl, NodeTimeout: nf.nodeTimeout, KeyPrefix: nf.keyPrefix,
		AllowFailoverNodes: nf.allowFailover, DurableVotes: nf.durableVotes, AllowEvictingNodes: nf.allowEvicting}
	if nf.verbose {
		opts.Logger = nf.logger(a)
		opts.Observer = eventLog{opts.Logger}
		redlock.SetGoRedisLogger(redisLog{opts.Logger})
	}
	return opts
}

// logger is the -v logger (nil without -v).
func (nf *nodeFlags) logger(a *app) *slog.Logger {
	if !nf.verbose {
		return nil
	}
	if nf.log == nil {
		nf.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nf.log
}

// logNodeError logs, with -v, a node's failure: which node, and why.
func (nf *nodeFlags) logNodeError(a *app, node string, err error) {
	if l := nf.logger(a); l != nil && err != nil {
		l.Warn("node problem", "node", node, "err", err)
	}
}

// eventLog writes the client's events to the -v log: the decisions it took (acquired with
// which token, an attempt failed and why, node by node) and the nodes it stopped counting.
type eventLog struct{ logger *slog.Logger }

// Observe implements observe.Observer.
func (l eventLog) Observe(e observe.Event) {
	attrs := []any{"event", e.Kind.String()}
	if e.Name != "" {
		attrs = append(attrs, "lock", e.Name)
	}
	if e.Node != "" {
		attrs = append(attrs, "node", e.Node)
	}
	if e.Token != 0 {
		attrs = append(attrs, "token", e.Token)
	}
	if e.Elapsed != 0 {
		attrs = append(attrs, "elapsed", e.Elapsed)
	}
	if e.Validity != 0 {
		attrs = append(attrs, "validity", e.Validity)
	}
	level := slog.LevelInfo
	if e.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, "err", e.Err)
	}
	l.logger.Log(context.Background(), level, "redlock "+e.Kind.String(), attrs...)
}

// redisLog takes go-redis' own log lines (a failed dial, once per attempt): with -v they go
// to the debug log, otherwise nowhere. redlock reports node failures itself, once, where they
// matter, instead of a line per connection attempt on stderr.
type redisLog struct{ logger *slog.Logger }

// Printf implements go-redis' logging interface.
func (l redisLog) Printf(ctx context.Context, format string, args ...any) {
	if l.logger != nil {
		l.logger.DebugContext(ctx, fmt.Sprintf(format, args...), "from", "go-redis")
	}
}

// connect builds a client for the nodes named by the flags.
func (nf *nodeFlags) connect(a *app, opts redlock.Options) (*redlock.Client, error) {
	urls, err := nf.urls(a)
	if err != nil {
		return nil, err
	}
	if opts.TLSConfig, err = nf.tls.config(a); err != nil {
		return nil, withExitCode(exitUsage, err)
	}
	// The CLI accepts 1 or 2 nodes (tests, a single-node setup on purpose) with the warning
	// below instead of the library's refusal: an operator reads it on every run.
	opts.AllowNoFaultTolerance = true
	c, err := redlock.NewFromURLs(urls, opts)
	var ce *redlock.ConfigError
	switch {
	case errors.Is(err, redlock.ErrNotIndependent) && !(errors.As(err, &ce) && strings.HasPrefix(ce.Reason, "given twice")):
		// A replica, or one server under two addresses: found on the nodes, not in the
		// command line (a URL given twice is), so 69 as for a node down (see exec's help).
		return nil, withExitCode(exitUnavailable, err)
	case err != nil:
		return nil, withExitCode(exitUsage, failoverHint(err))
	}
	if len(urls) < 3 {
		// With 1 or 2 nodes the quorum is all of them, so any one node down stops every lock.
		fmt.Fprintf(a.stderr, "redlock: warning: with %s, no node may fail (the quorum is all of them); use 3 or 5 independent masters\n", plural(len(urls), "node"))
	}
	return c, nil
}

// failoverHint adds the CLI's name of the opt-in to the library's refusal of a node that
// fails over, which names the option.
func failoverHint(err error) error {
	if errors.Is(err, redlock.ErrFailoverNode) {
		return fmt.Errorf("%w (the CLI's --durable-votes or --allow-failover-nodes)", err)
	}
	if errors.Is(err, redlock.ErrEvictingNode) {
		return fmt.Errorf("%w (the CLI's --allow-evicting-nodes)", err)
	}
	return err
}

// connectForView is connect for the commands that only read (nodes, status): when the
// library refuses a node that fails over (ErrFailoverNode, a Sentinel master), they still
// show the nodes, through a client that accepts such nodes, and report the refusal, which
// exec would meet, in refused.
func (nf *nodeFlags) connectForView(a *app, opts redlock.Options) (c *redlock.Client, refused, err error) {
	// The nodes are judged and shown by the command itself, a replica or a duplicate
	// among them too: New must not refuse them first.
	opts.DeferNodeChecks = true
	c, err = nf.connect(a, opts)
	if !errors.Is(err, redlock.ErrFailoverNode) {
		return c, nil, err
	}
	opts.AllowFailoverNodes = true
	c, retryErr := nf.connect(a, opts)
	if retryErr != nil {
		return nil, nil, retryErr
	}
	return c, err, nil
}

// graceFlag is --restart-grace: a duration, or "off" to count restarted nodes at once.
type graceFlag struct{ d time.Duration }

func (g *graceFlag) String() string {
	switch {
	case g == nil || g.d == 0:
		return ""
	case g.d == redlock.NoRestartGrace:
		return "off"
	}
	return g.d.String()
}

func (g *graceFlag) Set(s string) error {
	if s == "off" {
		g.d = redlock.NoRestartGrace
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("want a positive duration such as 30s, or off") // the caller names the value
	}
	g.d = d
	return nil
}

func (g *graceFlag) register(fs *flag.FlagSet) {
	fs.Var(g, "restart-grace", "how long a node that restarted sits out before its vote counts: a `duration`, or off (also for failovers, evictions and flushes), safe only on nodes with appendfsync always that never fail over, evict or get flushed (default: the lock TTL; the largest TTL in use on the nodes if longer)")
}

// ttlNodeFlags are the node flags of the commands that take the lock TTL and the restart
// grace (exec, nodes): the grace defaults to one TTL, and the options carry both.
type ttlNodeFlags struct {
	nodeFlags
	grace graceFlag
	ttl   time.Duration
}

// register adds the node flags, --restart-grace and --ttl (default 10s, described by ttlUsage).
func (f *ttlNodeFlags) register(fs *flag.FlagSet, ttlUsage string) {
	f.nodeFlags.register(fs)
	f.grace.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, ttlUsage)
}

// options is nodeFlags.options for --ttl, with --restart-grace.
func (f *ttlNodeFlags) options(a *app) redlock.Options {
	opts := f.nodeFlags.options(a, f.ttl)
	opts.RestartGrace = f.grace.d
	return opts
}

// registerTimeout adds --timeout, which bounds an operator command's calls to the nodes.
func registerTimeout(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("timeout", 5*time.Second, "give up on the nodes after this `long`")
}

// plural writes "1 node", "3 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// parseLockName parses the flags of a command that acts on one lock and
// returns the single lock name among its positional arguments.
func parseLockName(fs *flag.FlagSet, args []string) (string, error) {
	positional, err := parseFlags(fs, args)
	if err != nil {
		return "", err
	}
	if len(positional) != 1 {
		return "", usagef("want exactly one lock NAME, got %d arguments", len(positional))
	}
	return positional[0], nil
}

// positiveDuration rejects zero and negative durations for flags where they make no sense.
func positiveDuration(flagName string, d time.Duration) error {
	if d <= 0 {
		return usagef("--%s must be positive, got %v", flagName, d)
	}
	return nil
}
