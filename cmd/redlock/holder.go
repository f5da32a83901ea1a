package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/quorumlabs/redlock"
)

// holderMetadata is what exec records with the lock, so that `redlock status` tells an
// operator which host and process hold it, since when, and for which command:
// "host=web-1 pid=4242 started=2026-11-23T20:00:00Z cmd=./report.sh --since yesterday".
// The command comes last and is cut to fit redlock.MaxMetadataLen.
func holderMetadata(argv []string, started time.Time) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	md := fmt.Sprintf("host=%s pid=%d started=%s cmd=", host, os.Getpid(), started.UTC().Format(time.RFC3339))
	cmd := strings.Join(argv, " ")
	if room := redlock.MaxMetadataLen - len(md); len(cmd) > room {
		const more = "…"
		cut := room - len(more)
		for cut > 0 && !utf8.RuneStart(cmd[cut]) {
			cut-- // never split a character: the library takes only valid UTF-8
		}
		cmd = cmd[:cut] + more
	}
	return md + cmd
}

// printableMetadata shows metadata on one line: quoted if it holds control characters (a
// newline in it would break the table of a status).
func printableMetadata(md string) string {
	if strings.ContainsFunc(md, unicode.IsControl) {
		return strconv.Quote(md)
	}
	return md
}
