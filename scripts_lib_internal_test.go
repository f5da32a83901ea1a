package redlock

// The library of lua/lib.lua in front of the scripts (scripts.go
// assemble): which pieces a script gets, where an error's line lies in
// lua/, and the resource script that only the resource's server loads.

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// allScripts are the plain scripts (each with its batched form).
func allScripts() []*script {
	var ss []*script
	for _, s := range scripts {
		if s.batched != nil {
			ss = append(ss, s)
		}
	}
	return ss
}

// fileLines are the lines of lua/<file>, numbered from 1 (lines[0] is "").
func fileLines(t *testing.T, file string) []string {
	t.Helper()
	b, err := luaFiles.ReadFile("lua/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{""}, strings.Split(string(b), "\n")...)
}

// Every line of every script's source, plain or batched, is the line of
// lua/ that where names for it: the server's line numbers map back to the
// files through the library's pieces.
func TestEveryScriptLineMapsToItsFile(t *testing.T) {
	for _, s := range allScripts() {
		forms := []*script{s}
		if s.batched != nil {
			forms = append(forms, s.batched)
		}
		for _, form := range forms {
			lines := strings.Split(form.src, "\n")
			body := len(lines)
			if form != s {
				body = strings.Count(s.src, "\n") + 1 // then the batched run's loop
			}
			for n := 1; n <= body; n++ {
				place := form.where(n)
				var file string
				var at int
				if _, err := fmt.Sscanf(strings.ReplaceAll(place, ":", " "), "lua/%s %d", &file, &at); err != nil {
					t.Fatalf("%s line %d: where says %q", s.file, n, place)
				}
				want := fileLines(t, file)[at]
				if strings.Contains(s.src, shardedPublish) { // a sharded form: the file's PUBLISH made SPUBLISH
					want = strings.ReplaceAll(want, classicPublish, shardedPublish)
				}
				// The batched form puts its own code in front of the
				// library's first line and of the script's.
				if got := lines[n-1]; got != want && (form == s || !strings.HasSuffix(got, want)) {
					t.Errorf("%s (%s form) line %d is %q; where names %s, which is %q", s.file, formName(form, s), n, got, place, want)
				}
			}
			if form.where(body+1) != "" {
				t.Errorf("%s (%s form): the line after the script maps to %q", s.file, formName(form, s), form.where(body+1))
			}
		}
	}
}

func formName(form, s *script) string {
	if form == s {
		return "plain"
	}
	return "batched"
}

// A script gets the library's pieces it names, and those they name, and no
// other: a function costs a closure at every run.
func TestScriptsCarryOnlyTheLibraryPiecesTheyName(t *testing.T) {
	for file, want := range map[string][]string{
		"acquire.lua":         {"clock", "propose"},
		"extend.lua":          {"clock", "raise", "renew"},
		"raise.lua":           {"raise"},
		"rw_read_extend.lua":  {"clock", "nowus", "raise", "enter"},
		"rw_read_release.lua": {"clock", "nowus"},
		"release.lua":         nil,
		"ttl_register.lua":    nil,
	} {
		var s *script
		for _, c := range allScripts() {
			if c.file == file {
				s = c
			}
		}
		for _, p := range library {
			if got := strings.Contains(s.src, p.text); got != slices.Contains(want, p.names[0]) {
				t.Errorf("%s carries %s: %v, want %v", file, p.names[0], got, !got)
			}
		}
	}
}

// The batched form reads TIME once per run only because every script reads
// it through the library's clock, defined once per run.
func TestOnlyTheLibraryReadsTheClock(t *testing.T) {
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, _ := luaFiles.ReadFile(f)
		if strings.Contains(luaCode(string(b)), "'TIME'") != (f == "lua/lib.lua") {
			t.Errorf("%s reads TIME itself: %v; only lua/lib.lua's clock may", f, strings.Contains(string(b), "'TIME'"))
		}
		// A batched run's calls share the clock: none may change it.
		if m := clockWrite.FindString(luaCode(string(b))); m != "" && f != "lua/lib.lua" {
			t.Errorf("%s writes the clock: %q", f, m)
		}
	}
}

var clockWrite = regexp.MustCompile(`\b(clock|sec|usec|nowus)\s*(\[[^]]*\]\s*)?=[^=]|local[^=\n]*\b(clock|sec|usec|nowus)\b[^=\n]*=`)

// lineOf is the number of the line of lua/<file> that contains text.
func lineOf(t *testing.T, file, text string) int {
	t.Helper()
	for n, l := range fileLines(t, file) {
		if strings.Contains(l, text) {
			return n
		}
	}
	t.Fatalf("lua/%s has no line with %q", file, text)
	return 0
}

// An error the acquire script meets on a real server names the command and
// its place in lua/, in the script's own file or in the library, whether
// the script ran alone or in a batched run; the server's error stays
// wrapped, its code first.
func TestScriptErrorNamesItsFileLineAndCommand(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	rdb := cl.Clients()[0]
	ctx := context.Background()
	for _, k := range []string{"{lib}:list-lock", "{lib}:list-fence"} {
		if err := rdb.RPush(ctx, k, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	inFile := fmt.Sprintf("at lua/acquire.lua:%d, in its call of 'get'", lineOf(t, "acquire.lua", "if not won and redis.call('GET', KEYS[1])"))
	inLib := fmt.Sprintf("at lua/lib.lua:%d for lua/acquire.lua, in its call of 'get'", lineOf(t, "lib.lua", "local stored = redis.call('GET', key)"))
	calls := []struct {
		keys []string
		want string // "" for success
	}{
		{[]string{"{lib}:free-lock", "{lib}:free-fence"}, ""},
		{[]string{"{lib}:list-lock", "{lib}:free-fence"}, inFile}, // the lock key is a list
		{[]string{"{lib}:other-lock", "{lib}:list-fence"}, inLib}, // the fence register is
	}
	args := make([][]any, len(calls))
	for i, c := range calls {
		args[i] = acquireScript.args(c.keys, fmt.Sprint("owner-", i), 10000, 1000+i, 0)
	}
	check := func(form string, i int, vals []int64, err error) {
		want := calls[i].want
		switch {
		case want == "" && (err != nil || len(vals) != 4 || vals[0] != 1):
			t.Errorf("%s call %d: %v %v, want won", form, i, vals, err)
		case want != "" && (err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), want)):
			t.Errorf("%s call %d: %v, want WRONGTYPE %s", form, i, err, want)
		case want != "":
			t.Logf("%s call %d: %v", form, i, err)
		}
	}
	for i := range calls {
		vals, err := redisRunner{rdb}.run(ctx, acquireScript, args[i])
		check("alone", i, vals, err)
		if i == 0 {
			rdb.Del(ctx, calls[0].keys...)
		}
	}
	cmd := redis.NewIntSliceCmd(ctx, acquireScript.batchArgs(args, true)...)
	_ = rdb.Process(ctx, cmd)
	vals, errs := make([][]int64, len(calls)), make([]error, len(calls))
	splitBatch(acquireScript, cmd, nil, []int{0, 1, 2}, vals, errs)
	for i := range calls {
		check("batched", i, vals[i], errs[i])
	}
}

// A piece of functions is defined just before the first statement of the
// file that names it, so that a run that returns before makes no closure of
// it; the pieces of statements (the clock) stay in front. The batched form
// defines them all in front, once for the run.
func TestLibraryFunctionsAreDefinedWhereFirstNeeded(t *testing.T) {
	for _, c := range []struct {
		file, piece, after string // the piece comes after the line with after
	}{
		{"extend.lua", "local function raise(", "return {held, sec, usec}"},
		{"rw_write_extend.lua", "local function raise(", "return {held, sec, usec}"},
		{"fair_extend.lua", "local function raise(", "return {0, sec, usec}"},
		{"rw_write_acquire.lua", "local function enter(", "return {1, propose(KEYS[2], ARGV[3], ARGV[4]), sec, usec}"},
		{"rw_read_acquire.lua", "local function propose(", "return {0, -1, sec, usec}"},
		{"semaphore_acquire.lua", "local function propose(", "return {0, shortest, sec, usec, -1}"},
	} {
		var s *script
		for _, x := range allScripts() {
			if x.file == c.file {
				s = x
			}
		}
		src := s.src
		at, after := strings.Index(src, c.piece), strings.Index(src, c.after)
		if at < 0 || after < 0 || at < after {
			t.Errorf("%s: %q at %d, want after %q (at %d)", c.file, c.piece, at, c.after, after)
		}
		if !strings.HasPrefix(src, "-- The node's clock") && strings.Contains(src, "local clock = ") {
			t.Errorf("%s: the clock is not in front", c.file)
		}
		if lib, _, _ := strings.Cut(s.batched.src, "local function one("); !strings.Contains(lib, c.piece) {
			t.Errorf("%s: the batched form does not define %q once, before its calls", c.file, c.piece)
		}
	}
}

// assemble refuses to place a piece after a local of the file that the
// piece names: the piece would take the file's local for its own name.
func TestPlacedPieceMayNotCaptureTheFilesLocal(t *testing.T) {
	enter := library[slices.IndexFunc(library, func(p libPiece) bool { return p.names[0] == "enter" })]
	defer func() {
		if recover() == nil {
			t.Error("no panic for a file that declares the nowus enter uses")
		}
	}()
	checkCapture("x.lua", enter, []string{"local nowus = 1\n"})
}

func TestPlacedPieceMayShadowWithItsOwnNames(t *testing.T) {
	enter := library[slices.IndexFunc(library, func(p libPiece) bool { return p.names[0] == "enter" })]
	checkCapture("x.lua", enter, []string{"local ttl, key = 1, 2\n", "for member in pairs({}) do\n", "end\n"})
}
