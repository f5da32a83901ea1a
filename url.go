package redlock

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The kinds of node (NodeInfo.Kind, NodeURL.Kind): one server, or a
// deployment of servers that the client finds the lock's master in.
const (
	// kindMaster is a standalone master (a redis:// or rediss:// URL, a
	// *redis.Client).
	kindMaster = "master"
	// kindCluster is a Redis Cluster (a redis+cluster:// URL, a
	// *redis.ClusterClient): the master that serves the lock's hash slot
	// holds its keys.
	kindCluster = "cluster"
	// kindSentinel is a master managed by Sentinel (a redis+sentinel:// URL,
	// a client of redis.NewFailoverClient): the master Sentinel names holds
	// the keys.
	kindSentinel = "sentinel"
)

// NodeURL is a parsed node URL: Kind tells which of Master, Cluster and
// Sentinel is set.
type NodeURL struct {
	Kind     string // "master", "cluster" or "sentinel"
	Master   *redis.Options
	Cluster  *redis.ClusterOptions
	Sentinel *redis.FailoverOptions
}

// sentinelPort is the port a redis+sentinel:// URL's host gets when it
// names none: Sentinel's own default, not the server's 6379 (go-redis'
// ParseFailoverURL would dial 6379, most likely the master itself).
const sentinelPort = "26379"

// The URL parameter that names the master a Sentinel URL is about, as in
// go-redis' ParseFailoverURL.
const urlMasterName = "master_name"

// parseURL parses a standalone node URL: redis://[user[:password]@]host:port[/db] or
// rediss://... for TLS, with go-redis' query options (dial_timeout=1s,
// ...). Its errors never contain the password. NewFromURLs parses a
// standalone node's URL with it.
//
// A rediss:// URL may name TLS files in its query, as redis-cli's flags do:
// cacert (a bundle of the CA certificates that sign the node's certificate;
// default: the system roots), cert and key (a client certificate and its
// key, for nodes that ask for one) and sni (the name the node's certificate
// must be valid for, instead of the URL's host). The files are read here:
// a missing or unreadable file, one with no PEM certificate, a key that
// does not match its certificate or an expired certificate is a
// *ConfigError naming the file. See LoadTLSConfig.
func parseURL(raw string) (*redis.Options, error) {
	n, err := parseNodeURL(raw, nil)
	if err != nil {
		return nil, err
	}
	if n.Kind != kindMaster {
		return nil, configErr("node URL", RedactURL(raw), fmt.Sprintf("is a %s node: parse it with ParseNodeURL", n.Kind))
	}
	return n.Master, nil
}

// ParseNodeURL parses a node URL of any kind. The forms follow go-redis'
// ParseURL, ParseClusterURL and ParseFailoverURL, with the scheme telling
// the kind (every form also takes rediss for TLS, and the TLS parameters
// below):
//
//   - redis://[user[:password]@]host:port[/db]: a standalone master.
//   - redis+cluster://[user[:password]@]host:port?addr=host2:port2&addr=...:
//     a Redis Cluster, from one or more seed addresses (any of its servers);
//     go-redis finds the others and the master of each slot. No db.
//   - redis+sentinel://[user[:password]@]host:port[/db]?master_name=NAME&addr=host2:port2&...:
//     the master that the Sentinels at host:port and the addr parameters
//     know as NAME. The URL's credentials are the Sentinels' (as in
//     go-redis); the master's go in the username and password parameters.
//     The host's port defaults to Sentinel's 26379.
//
// A rediss:// URL may name TLS files in its query, as redis-cli's flags do:
// cacert (a bundle of the CA certificates that sign the node's certificate;
// default: the system roots), cert and key (a client certificate and its
// key, for nodes that ask for one) and sni (the name the node's certificate
// must be valid for, instead of the URL's host). The files are read here:
// a missing or unreadable file, one with no PEM certificate, a key that
// does not match its certificate or an expired certificate is a
// *ConfigError naming the file. See LoadTLSConfig.
//
// A bad value is a *ConfigError that names it: no host, a port outside 1
// to 65535, an addr without a port, no master_name, a parameter go-redis
// does not know. No error contains a password.
func ParseNodeURL(raw string) (*NodeURL, error) {
	return parseNodeURL(raw, nil)
}

// hostPortOnly tells whether s can only be a host, or host:port, written
// without a scheme.
func hostPortOnly(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]", r)) {
			return false
		}
	}
	return s != ""
}

// parseNodeURL is ParseNodeURL with base, if not nil, as the TLS
// configuration of a rediss URL, its TLS parameters applied to a copy of it.
func parseNodeURL(raw string, base *tls.Config) (*NodeURL, error) {
	shown := RedactURL(raw)
	bad := func(reason string) error { return configErr("node URL", shown, reason) }
	if strings.TrimSpace(raw) == "" {
		return nil, configErr("node URL", `""`, "is empty")
	}
	if !strings.Contains(raw, "://") && hostPortOnly(raw) {
		// host:port alone, the way redis-cli takes it. (Nothing else is
		// shown back: a user or password would not pass hostPortOnly.)
		return nil, bad("has no scheme: write redis://" + shown + " (redis+cluster:// for a Cluster, redis+sentinel:// for a Sentinel master, rediss for TLS)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse names a port that is not a number ("invalid port \":76o1\" after
		// host"); no other part of the URL, which may hold a password.
		if _, after, ok := strings.Cut(err.Error(), "invalid port "); ok {
			if port, _, ok := strings.Cut(after, " after host"); ok {
				if p, qerr := strconv.Unquote(port); qerr == nil {
					return nil, bad(fmt.Sprintf("has port %q: want a number from 1 to 65535", strings.TrimPrefix(p, ":")))
				}
			}
		}
		return nil, bad("is not a valid URL")
	}
	scheme, kind, known := strings.Cut(u.Scheme, "+")
	if scheme != "redis" && scheme != "rediss" || known && kind != string(kindCluster) && kind != string(kindSentinel) {
		return nil, bad("must start with redis://, redis+cluster:// or redis+sentinel:// (rediss for TLS)")
	}
	n := &NodeURL{Kind: kindMaster}
	if known {
		n.Kind = kind
	}
	if u.Hostname() == "" {
		return nil, bad("has no host")
	}
	// go-redis accepts any digits as a port and the dial fails much later, as
	// a node error instead of a configuration error naming the value.
	if err := checkPort(u.Port()); err != nil {
		return nil, bad(err.Error())
	}
	if n.Kind != kindMaster {
		for _, addr := range u.Query()["addr"] {
			host, port, err := net.SplitHostPort(addr)
			switch {
			case err != nil || host == "" || port == "":
				return nil, bad(fmt.Sprintf("has addr=%s: want host:port", addr))
			case checkPort(port) != nil:
				return nil, bad(fmt.Sprintf("has addr=%s: %v", addr, checkPort(port)))
			}
		}
	}
	if n.Kind == kindSentinel {
		if strings.TrimSpace(u.Query().Get(urlMasterName)) == "" {
			return nil, bad("has no master_name: a Sentinel URL names the master (redis+sentinel://host:26379?master_name=mymaster)")
		}
		if u.Port() == "" {
			u.Host = net.JoinHostPort(u.Hostname(), sentinelPort)
		}
	}
	if n.Kind == kindCluster && strings.Trim(u.Path, "/") != "" {
		return nil, bad("has a database number: a Redis Cluster has only database 0")
	}
	files, hasTLSFiles := tlsFilesOf(u)
	if hasTLSFiles && scheme != "rediss" {
		return nil, bad("names TLS files (cacert, cert, key, sni) but is not a rediss:// (TLS) URL")
	}
	if base != nil && scheme != "rediss" {
		return nil, bad("is a plain redis:// URL, but TLS settings are given (Options.TLSConfig, or the CLI's --cacert, --cert, --key, --sni): use rediss://")
	}
	// go-redis' parsers take the plain schemes.
	u.Scheme = scheme
	var cfg **tls.Config
	switch n.Kind {
	case kindMaster:
		n.Master, err = redis.ParseURL(u.String())
		if err == nil {
			cfg = &n.Master.TLSConfig
		}
	case kindCluster:
		n.Cluster, err = redis.ParseClusterURL(u.String())
		if err == nil {
			cfg = &n.Cluster.TLSConfig
		}
	case kindSentinel:
		n.Sentinel, err = redis.ParseFailoverURL(u.String())
		if err == nil {
			cfg = &n.Sentinel.TLSConfig
		}
	}
	if err != nil {
		return nil, bad(strings.TrimPrefix(hideCredentials(err.Error(), u), "redis: "))
	}
	if base != nil {
		// go-redis set the server name to the URL's host, and skip_verify.
		c := base.Clone()
		if c.ServerName == "" {
			c.ServerName = (*cfg).ServerName
		}
		c.InsecureSkipVerify = c.InsecureSkipVerify || (*cfg).InsecureSkipVerify
		*cfg = c
	}
	if hasTLSFiles {
		if *cfg, err = files.apply(*cfg, time.Now()); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// checkPort checks a URL's port, "" (the default) or 1 to 65535.
func checkPort(p string) error {
	if p == "" {
		return nil
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("has port %s: want 1 to 65535", p)
	}
	return nil
}

// hideCredentials takes out of a go-redis error every credential of u.
func hideCredentials(reason string, u *url.URL) string {
	secrets := []string{u.User.Username()} // may be a password (see RedactURL)
	if pw, ok := u.User.Password(); ok {
		secrets = append(secrets, pw)
	}
	secrets = append(secrets, u.Query()["password"]...)
	for _, s := range secrets {
		if s != "" {
			reason = strings.ReplaceAll(reason, s, "xxxxx")
		}
	}
	return reason
}

// client builds the go-redis client of the node, with the settings every
// node of NewFromURLs gets (see there), its dials watched by route (see
// golog.go). The caller owns it.
func (n *NodeURL) client(maxRetriesSet bool, route *logRoute) redis.UniversalClient {
	// A refused connection is an answer: report it at once. go-redis would
	// dial 5 times, 100ms apart, and retry the command 3 times more on top,
	// which turned 3 stopped nodes of 5 into seconds of waiting. The client
	// has its own retry loop (Acquire) with jitter and a wake-up on release.
	// -1, not 0, for no retries: 0 means go-redis' default of 3. (A Cluster
	// client still follows MOVED and ASK: MaxRedirects.) Per-node timeouts
	// are context deadlines: make go-redis honour them.
	maxRetries := func(v *int) {
		if !maxRetriesSet {
			*v = -1
		}
	}
	switch n.Kind {
	case kindCluster:
		o := *n.Cluster
		o.ContextTimeoutEnabled, o.DialerRetries = true, 1
		maxRetries(&o.MaxRetries)
		o.Dialer = route.dialer(baseDialer(o.DialTimeout, o.TLSConfig))
		route.watch(o.Addrs...) // the seeds; the other servers as they are dialled
		return redis.NewClusterClient(&o)
	case kindSentinel:
		o := *n.Sentinel
		o.ContextTimeoutEnabled, o.DialerRetries = true, 1
		maxRetries(&o.MaxRetries)
		o.Dialer = route.dialer(baseDialer(o.DialTimeout, o.TLSConfig)) // the Sentinels' and the master's
		// go-redis' Sentinel notices name the master by its name
		// (name="locks", master="locks"), and tell the master's address
		// before it is first dialled.
		route.watch(o.SentinelAddrs...)
		route.watch(fmt.Sprintf("name=%q", o.MasterName), fmt.Sprintf("master=%q", o.MasterName))
		return redis.NewFailoverClient(&o)
	}
	o := *n.Master
	o.ContextTimeoutEnabled, o.DialerRetries = true, 1
	maxRetries(&o.MaxRetries)
	o.Dialer = route.dialer(baseDialer(o.DialTimeout, o.TLSConfig))
	route.watch(o.Addr)
	return redis.NewClient(&o)
}

// RedactURL hides the credentials of a node URL, for logs and errors: all of
// the user info, since "redis://s3cret@host" puts a password where the user
// name goes (Redis' AUTH with one argument is a password). It hides
// everything before an '@' when the URL does not even parse.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil {
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		if u.User != nil {
			u.User = url.User("xxxxx")
		}
		return u.String()
	}
	prefix, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = "xxxxx@" + rest[at+1:]
	}
	return prefix + queryPassword.ReplaceAllString(rest, "${1}xxxxx")
}

// queryPassword finds the value of a password parameter (password=, and
// go-redis' sentinel_password=) in a URL that does not parse.
var queryPassword = regexp.MustCompile(`((?:^|[?&])[a-z_]*password=)[^&#]*`)
