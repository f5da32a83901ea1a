package redlock

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ParseURL parses a node URL: redis://[user[:password]@]host:port[/db] or
// rediss://... for TLS, with go-redis' query options (dial_timeout=1s,
// ...). Its errors never contain the password.
//
// A rediss:// URL may name TLS files in its query, as redis-cli's flags do:
// cacert (a bundle of the CA certificates that sign the node's certificate;
// default: the system roots), cert and key (a client certificate and its
// key, for nodes that ask for one) and sni (the name the node's certificate
// must be valid for, instead of the URL's host). The files are read here:
// a missing or unreadable file, one with no PEM certificate, a key that
// does not match its certificate or an expired certificate is a
// *ConfigError naming the file. See LoadTLSConfig.
func ParseURL(raw string) (*redis.Options, error) {
	return parseURL(raw, nil)
}

// parseURL is ParseURL with base, if not nil, as the TLS configuration of a
// rediss:// URL, its TLS parameters applied to a copy of it.
func parseURL(raw string, base *tls.Config) (*redis.Options, error) {
	shown := RedactURL(raw)
	if strings.TrimSpace(raw) == "" {
		return nil, configErr("node URL", `""`, "is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, configErr("node URL", shown, "is not a valid URL")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, configErr("node URL", shown, "must start with redis:// or rediss:// (TLS)")
	}
	if u.Hostname() == "" {
		return nil, configErr("node URL", shown, "has no host")
	}
	if p := u.Port(); p != "" {
		// go-redis accepts any digits here and the dial fails much later, as a node
		// error instead of a configuration error naming the value.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, configErr("node URL", shown, fmt.Sprintf("has port %s: want 1 to 65535", p))
		}
	}
	files, hasTLSFiles := tlsFilesOf(u)
	if hasTLSFiles && u.Scheme != "rediss" {
		return nil, configErr("node URL", shown, "names TLS files (cacert, cert, key, sni) but is not a rediss:// (TLS) URL")
	}
	if base != nil && u.Scheme != "rediss" {
		return nil, configErr("node URL", shown, "is a plain redis:// URL, but TLS settings are given (Options.TLSConfig, or the CLI's --cacert, --cert, --key, --sni): use rediss://")
	}
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		reason := err.Error()
		if pw, ok := u.User.Password(); ok && pw != "" {
			reason = strings.ReplaceAll(reason, pw, "xxxxx")
		}
		if name := u.User.Username(); name != "" {
			reason = strings.ReplaceAll(reason, name, "xxxxx") // may be a password (see RedactURL)
		}
		return nil, configErr("node URL", shown, strings.TrimPrefix(reason, "redis: "))
	}
	if base != nil {
		// go-redis set the server name to the URL's host, and skip_verify.
		cfg := base.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = opts.TLSConfig.ServerName
		}
		cfg.InsecureSkipVerify = cfg.InsecureSkipVerify || opts.TLSConfig.InsecureSkipVerify
		opts.TLSConfig = cfg
	}
	if hasTLSFiles {
		if opts.TLSConfig, err = files.apply(opts.TLSConfig, time.Now()); err != nil {
			return nil, err
		}
	}
	return opts, nil
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
		return prefix + "xxxxx@" + rest[at+1:]
	}
	return raw
}
