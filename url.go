package redlock

import (
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ParseURL parses a node URL: redis://[user[:password]@]host:port[/db] or
// rediss://... for TLS, with go-redis' query options (dial_timeout=1s,
// ...). Its errors never contain the password.
func ParseURL(raw string) (*redis.Options, error) {
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
	opts, err := redis.ParseURL(raw)
	if err != nil {
		reason := err.Error()
		if pw, ok := u.User.Password(); ok && pw != "" {
			reason = strings.ReplaceAll(reason, pw, "xxxxx")
		}
		return nil, configErr("node URL", shown, strings.TrimPrefix(reason, "redis: "))
	}
	return opts, nil
}

// RedactURL hides the password of a node URL, for logs and errors. It
// hides everything before an '@' when the URL does not even parse.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil {
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
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
