package redlock_test

// Node URLs of every kind: a Redis Cluster (redis+cluster://) and a master
// managed by Sentinel (redis+sentinel://), in go-redis' conventions.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

func TestParseNodeURLKinds(t *testing.T) {
	for _, tc := range []struct {
		url   string
		kind  string
		addrs []string // the seeds (cluster), the Sentinels (sentinel) or the address
		tls   bool
		check func(*redlock.NodeURL) error
	}{
		{url: "redis://127.0.0.1:6379/2", kind: redlock.KindMaster, addrs: []string{"127.0.0.1:6379"}},
		{url: "redis+cluster://10.0.0.1:7000", kind: redlock.KindCluster, addrs: []string{"10.0.0.1:7000"}},
		{url: "redis+cluster://app:s3cret@10.0.0.1:7000?addr=10.0.0.2:7001&addr=[::1]:7002&dial_timeout=2s",
			kind: redlock.KindCluster, addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"},
			check: func(n *redlock.NodeURL) error {
				if n.Cluster.Username != "app" || n.Cluster.Password != "s3cret" || n.Cluster.DialTimeout != 2*time.Second {
					return fmt.Errorf("credentials or dial_timeout lost: %q %v", n.Cluster.Username, n.Cluster.DialTimeout)
				}
				return nil
			}},
		{url: "rediss+cluster://cfg.example.cache.amazonaws.com:6379", kind: redlock.KindCluster, tls: true,
			addrs: []string{"cfg.example.cache.amazonaws.com:6379"},
			check: func(n *redlock.NodeURL) error {
				if sn := n.Cluster.TLSConfig.ServerName; sn != "cfg.example.cache.amazonaws.com" {
					return fmt.Errorf("TLS server name %q", sn)
				}
				return nil
			}},
		{url: "redis+sentinel://s1:26379?addr=s2:26380&master_name=locks&password=masterpw", kind: redlock.KindSentinel,
			addrs: []string{"s1:26379", "s2:26380"},
			check: func(n *redlock.NodeURL) error {
				if n.Sentinel.MasterName != "locks" || n.Sentinel.Password != "masterpw" || n.Sentinel.SentinelPassword != "" {
					return fmt.Errorf("master %q, master password %q, sentinel password %q", n.Sentinel.MasterName, n.Sentinel.Password, n.Sentinel.SentinelPassword)
				}
				return nil
			}},
		// Without a port, the Sentinel's own default, not the server's.
		{url: "rediss+sentinel://:sentpw@sentinel.example/3?master_name=locks", kind: redlock.KindSentinel, tls: true,
			addrs: []string{"sentinel.example:26379"},
			check: func(n *redlock.NodeURL) error {
				if n.Sentinel.DB != 3 || n.Sentinel.SentinelPassword != "sentpw" {
					return fmt.Errorf("db %d, sentinel password %q", n.Sentinel.DB, n.Sentinel.SentinelPassword)
				}
				return nil
			}},
	} {
		shown := redlock.RedactURL(tc.url)
		n, err := redlock.ParseNodeURL(tc.url)
		if err != nil {
			t.Errorf("%s: %v", shown, err)
			continue
		}
		var addrs []string
		var tls bool
		switch n.Kind {
		case redlock.KindMaster:
			addrs, tls = []string{n.Master.Addr}, n.Master.TLSConfig != nil
		case redlock.KindCluster:
			addrs, tls = n.Cluster.Addrs, n.Cluster.TLSConfig != nil
		case redlock.KindSentinel:
			addrs, tls = n.Sentinel.SentinelAddrs, n.Sentinel.TLSConfig != nil
		}
		if n.Kind != tc.kind || fmt.Sprint(addrs) != fmt.Sprint(tc.addrs) || tls != tc.tls {
			t.Errorf("%s: kind %s, addresses %v, TLS %v; want %s, %v, %v", shown, n.Kind, addrs, tls, tc.kind, tc.addrs, tc.tls)
			continue
		}
		if tc.check != nil {
			if err := tc.check(n); err != nil {
				t.Errorf("%s: %v", shown, err)
			}
		}
	}
}

// Every bad Cluster or Sentinel URL is a *ConfigError that names what is
// wrong, and no error shows a password, the user info's or the master's.
func TestParseNodeURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis+sentinel://app:hunter2@s1:26379", "no master_name"},
		{"redis+sentinel://app:hunter2@s1:26379?master_name=+", "no master_name"},
		{"redis+sentinel://s1:26379?master_name=m&password=hunter2&addr=s2", "addr=s2: want host:port"},
		{"redis+sentinel://s1:26379?master_name=m&password=hunter2&addr=s2:70000", "addr=s2:70000: has port 70000"},
		{"redis+sentinel://app:hunter2@s1:0?master_name=m", "port 0"},
		{"redis+sentinel://s1:26379/x?master_name=m&password=hunter2", "database number"},
		{"redis+cluster://app:hunter2@:7000", "no host"},
		{"redis+cluster://app:hunter2@h:7000?addr=:7001", "addr=:7001: want host:port"},
		{"redis+cluster://app:hunter2@h:123456", "port 123456"},
		{"redis+cluster://app:hunter2@h:7000/1", "only database 0"},
		{"redis+cluster://app:hunter2@h:7000?no_such_option=1", "no_such_option"},
		{"redis+cluster://app:hunter2@h:7000?cacert=/x.pem", "not a rediss:// (TLS) URL"},
		{"redis+ring://app:hunter2@h:7000", "redis+cluster://"},
		{"http+cluster://app:hunter2@h:7000", "redis+sentinel://"},
	} {
		shown := redlock.RedactURL(tc.url)
		_, err := redlock.ParseNodeURL(tc.url)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || ce.Field != "node URL" {
			t.Errorf("%s: want a *ConfigError about the node URL, got %v", shown, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q does not say %q", shown, err, tc.want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the password shows in %q", shown, err)
		}
	}
	// ParseURL is for standalone masters: it points elsewhere for the rest.
	if _, err := redlock.ParseURL("redis+cluster://h:7000"); !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), "ParseNodeURL") {
		t.Errorf("ParseURL of a cluster URL: %v", err)
	}
	redacts(t, map[string]string{
		"redis+sentinel://u:s3cretpw@s1:26379?master_name=m&password=s3cretpw": "redis+sentinel://xxxxx@s1:26379?master_name=m&password=xxxxx",
		"rediss+cluster://s3cretpw@h:1?addr=h2:2":                              "rediss+cluster://xxxxx@h:1?addr=h2:2",
		// Not a URL (a control character): still no password.
		"redis+sentinel://h:1?master_name=m&password=s3cretpw&\x13": "redis+sentinel://h:1?master_name=m&password=xxxxx&\x13",
		"redis://h:1?password=s3cretpw\x13":                         "redis://h:1?password=xxxxx",
	})
}

// lockMasters gives the masters that hold name's key: the master of rc
// that serves its slot, and the master ss names.
func lockMasters(t *testing.T, ctx context.Context, rc *redistest.RedisCluster, ss *redistest.Sentinels, c *redlock.Client, name string) (slotMaster, sentinelMaster *redistest.Server) {
	t.Helper()
	slotMaster, err := rc.MasterFor(ctx, c.Keys(name).Slot)
	if err != nil {
		t.Fatal(err)
	}
	sentinelMaster, err = ss.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slotMaster, sentinelMaster
}

// A client built from a Cluster URL (two seeds of a cluster of two masters)
// and a Sentinel URL (three Sentinels) takes a lock on both: the key is on
// the master that serves the lock's slot and on the master Sentinel names.
func TestNewFromURLsClusterAndSentinel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc, ss := redistest.StartDeploymentsT(t, ctx, 0)
	seeds := rc.Addrs()
	clusterURL := "redis+cluster://" + seeds[0] + "?addr=" + url.QueryEscape(seeds[1])
	sentinels := ss.SentinelAddrs()
	sentinelURL := "redis+sentinel://" + sentinels[0] + "?master_name=" + ss.Name
	for _, s := range sentinels[1:] {
		sentinelURL += "&addr=" + s
	}
	urls := []string{clusterURL, sentinelURL}

	// The Sentinel node fails over: refused without the opt-in.
	if _, err := redlock.NewFromURLs(urls, redlock.Options{TTL: time.Second, AllowNoFaultTolerance: true}); !errors.Is(err, redlock.ErrFailoverNode) {
		t.Fatalf("a Sentinel URL without AllowFailoverNodes: want ErrFailoverNode, got %v", err)
	}
	c, err := redlock.NewFromURLs(urls, redlock.Options{TTL: time.Second, AllowFailoverNodes: true, AllowNoFaultTolerance: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Two nodes: the quorum is both, so the lock below is on both.
	eventually(t, 20*time.Second, "both nodes vote after their start's grace", func() bool {
		for _, info := range c.Nodes(ctx) {
			if !info.Voting {
				return false
			}
		}
		return true
	})
	for _, name := range []string{nameInSlots(c, "job", 0, 8191), nameInSlots(c, "job", 8192, 16383)} {
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		slotMaster, master := lockMasters(t, ctx, rc, ss, c, name)
		for _, s := range []*redistest.Server{slotMaster, master} {
			if n, err := s.Client().Exists(ctx, c.Keys(name).Lock).Result(); err != nil || n != 1 {
				t.Fatalf("%s: the lock key is not on %s (%d, %v)", name, s.Addr, n, err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The operator's view of deployments: each node's kind, the masters behind
// it (for one lock: the master serving its slot, the master Sentinel
// names), their replicas and how far behind they are, and the library's own
// refusal of a node that fails over without the opt-in.
func TestNodesForShowsMastersAndReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc, ss := redistest.StartDeploymentsT(t, ctx, 1)
	clusterURL := "redis+cluster://" + rc.Addrs()[0]
	sentinelURL := "redis+sentinel://" + ss.SentinelAddrs()[0] + "?master_name=" + ss.Name

	// A 10s TTL: probes get 4 node timeouts of 200ms, room for a loaded machine.
	refused, err := redlock.NewFromURLs([]string{clusterURL}, redlock.Options{TTL: 10 * time.Second, AllowNoFaultTolerance: true})
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	var info redlock.NodeInfo
	eventually(t, 10*time.Second, "the cluster node is probed", func() bool {
		info = refused.Nodes(ctx)[0]
		return info.Err == nil
	})
	if !errors.Is(info.Refused, redlock.ErrFailoverNode) || info.Voting {
		t.Fatalf("a cluster with replicas without the opt-in: want Refused to match ErrFailoverNode and no vote, got err %v, refused %v, voting %v", info.Err, info.Refused, info.Voting)
	}

	c, err := redlock.NewFromURLs([]string{clusterURL, sentinelURL}, redlock.Options{TTL: 10 * time.Second, AllowFailoverNodes: true, AllowNoFaultTolerance: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var all []redlock.NodeInfo
	eventually(t, 10*time.Second, "both nodes are probed", func() bool {
		all = c.Nodes(ctx)
		return all[0].Err == nil && all[1].Err == nil
	})
	if all[0].Kind != redlock.KindCluster || all[1].Kind != redlock.KindSentinel || len(all[0].Masters) != 2 || all[0].Refused != nil {
		t.Fatalf("Nodes: kinds %s and %s, %d cluster masters, refused %v; want cluster, sentinel, 2, nil", all[0].Kind, all[1].Kind, len(all[0].Masters), all[0].Refused)
	}
	name := nameInSlots(c, "job", 8192, 16383)
	slotMaster, sentinelMaster := lockMasters(t, ctx, rc, ss, c, name)
	// A replica's acknowledgement comes every second: wait for both to be
	// online and caught up, as the view shows it.
	var infos []redlock.NodeInfo
	eventually(t, 20*time.Second, "both nodes' masters listed with one replica each, online and caught up", func() bool {
		if infos, err = c.NodesFor(ctx, name); err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if in.Err != nil || len(in.Masters) != 1 || len(in.Masters[0].Replicas) != 1 {
				return false
			}
			if r := in.Masters[0].Replicas[0]; r.State != "online" || r.Behind != 0 {
				return false
			}
		}
		return true
	})
	for i, want := range []*redistest.Server{slotMaster, sentinelMaster} {
		if got := infos[i].Masters[0].Addr; got != want.Addr {
			t.Errorf("node %d: master %s, want %s", i+1, got, want.Addr)
		}
	}
	serves := false
	for _, r := range infos[0].Masters[0].Slots {
		serves = serves || r.First <= c.Keys(name).Slot && c.Keys(name).Slot <= r.Last
	}
	if !serves {
		t.Errorf("the cluster master listed for %s serves %v, not slot %d", name, infos[0].Masters[0].Slots, c.Keys(name).Slot)
	}
	if _, err := c.NodesFor(ctx, ""); !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Errorf("NodesFor with no name: want ErrInvalidConfig, got %v", err)
	}
}
