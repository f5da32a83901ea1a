package redlock

import (
	"fmt"
	"net/url"
	"strconv"
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
	if p := u.Port(); p != "" {
		// go-redis accepts any digits here and the dial fails much later, as a node
		// error instead of a configuration error naming the value.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, configErr("node URL", shown, fmt.Sprintf("has port %s: want 1 to 65535", p))
		}
	}
	opts, err := redis.ParseURL(raw)
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
