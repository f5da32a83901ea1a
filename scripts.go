package redlock

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
)

// The registry of the compare-and-act scripts, one per file in lua/, each
// run with the pieces of lua/lib.lua it names in front of it (see
// assemble). The core's scripts are declared here, each lock kind's in the
// kind's own file; script.go runs them. They all answer with an array of
// integers, which go-redis reads without boxing a value per field.
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	acquireScript     = newScript("acquire.lua")
	raiseScript       = newScript("raise.lua")
	extendScript      = newRenewalScript("extend.lua")
	releaseScript     = newScript("release.lua")
	ttlRegisterScript = newRenewalScript("ttl_register.lua")
)

// scripts lists every script made by newScript: the probes load them all,
// so a new script needs nothing more than its newScript line.
var scripts []*script

func newScript(file string) *script {
	s, lib, body, batchLines := assemble(file)
	b := batchSrc(lib, body)
	s.batched = &script{file: file, src: b, srcArg: b, lines: batchLines}
	scripts = append(scripts, s, s.batched)
	if strings.Contains(s.src, classicPublish) {
		s.sharded = shardedForm(s)
		s.sharded.batched = shardedForm(s.batched)
		scripts = append(scripts, s.sharded, s.sharded.batched)
	}
	return s
}

// classicPublish is how a script announces on a lock's channel; a node
// whose wake-ups are sharded (nodePipes.sharded) runs the script's
// sharded form instead, which says shardedPublish.
const (
	classicPublish = "redis.call('PUBLISH'"
	shardedPublish = "redis.call('SPUBLISH'"
)

// shardedForm is s with every PUBLISH made SPUBLISH: on a Redis Cluster
// a PUBLISH is broadcast to every node of the cluster over the cluster
// bus, an SPUBLISH reaches only the nodes of the channel's shard (the
// lock's channel shares its keys' hash slot, which is what SPUBLISH in a
// script asks). The command is the only change, so lines, arguments and
// replies stay those of s; it is a form of its own rather than an
// argument because one command built per operation is shared by the
// calls to every node (script.args), and the nodes of one client may be
// Cluster and standalone at once.
func shardedForm(s *script) *script {
	src := strings.ReplaceAll(s.src, classicPublish, shardedPublish)
	return &script{file: s.file, src: src, srcArg: src, lines: s.lines, renewal: s.renewal}
}

// forms lists the forms of s that a node may run: s, its batched form and,
// for a script that publishes, their sharded forms.
func (s *script) forms() []*script {
	f := []*script{s}
	if s.batched != nil {
		f = append(f, s.batched)
	}
	if s.sharded != nil {
		f = append(f, s.sharded.forms()...)
	}
	return f
}

func newRenewalScript(file string) *script {
	s := newScript(file)
	for _, f := range s.forms() {
		f.renewal = true
	}
	return s
}

// libPiece is one piece of lua/lib.lua: the lines first to last of the
// file.
type libPiece struct {
	names []string // the locals it declares
	// fn: it declares only functions (local function f), which a script
	// may define where it first needs them (see assemble); else it is
	// statements (the clock), which go in front
	fn          bool
	first, last int
	text        string
	needs       []string // the names of earlier pieces it uses
}

// library holds lua/lib.lua's pieces in the file's order.
var library = parseLibrary(mustRead("lib.lua"))

func mustRead(file string) string {
	b, err := luaFiles.ReadFile("lua/" + file)
	if err != nil {
		panic("redlock: embedded script " + file + ": " + err.Error())
	}
	return string(b)
}

// parseLibrary cuts the library into its pieces: the runs of lines between
// blank lines, but the file's opening comment. A piece is named by the
// locals its lines at column 1 declare ("local function f(", "local a, b =").
func parseLibrary(src string) []libPiece {
	lines := strings.SplitAfter(src, "\n")
	var pieces []libPiece
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && strings.TrimSpace(lines[j]) != "" {
			j++
		}
		if j > i && i > 0 {
			pieces = append(pieces, libPiece{first: i + 1, last: j, text: strings.Join(lines[i:j], "")})
		}
		i = j + 1
	}
	for i := range pieces {
		p := &pieces[i]
		p.fn = true
		for _, l := range strings.Split(p.text, "\n") {
			decl, ok := strings.CutPrefix(l, "local ")
			if !ok {
				continue
			}
			if f, ok := strings.CutPrefix(decl, "function "); ok {
				name, _, _ := strings.Cut(f, "(")
				p.names = append(p.names, name)
				continue
			}
			p.fn = false
			decl, _, _ = strings.Cut(decl, "=")
			for _, name := range strings.Split(decl, ",") {
				p.names = append(p.names, strings.TrimSpace(name))
			}
		}
		if len(p.names) == 0 {
			panic(fmt.Sprintf("redlock: lua/lib.lua:%d-%d declares no local", p.first, p.last))
		}
		code := luaCode(p.text)
		for _, q := range pieces[:i] {
			if namesAny(code, q.names) {
				p.needs = append(p.needs, q.names[0])
			}
		}
	}
	return pieces
}

// namesAny tells whether code uses any of names as a whole word.
func namesAny(code string, names []string) bool {
	for _, n := range names {
		if usesName(code, n) {
			return true
		}
	}
	return false
}

// luaCode is src without its comments, for finding the names it uses. The
// scripts put no "--" inside a string.
func luaCode(src string) string {
	var b strings.Builder
	for _, l := range strings.Split(src, "\n") {
		code, _, _ := strings.Cut(l, "--")
		b.WriteString(code)
		b.WriteByte('\n')
	}
	return b.String()
}

// usesName tells whether code uses name as a whole word.
func usesName(code, name string) bool {
	for rest := code; ; {
		i := strings.Index(rest, name)
		if i < 0 {
			return false
		}
		before, after := i == 0 || !isWordByte(rest[i-1]), i+len(name) == len(rest) || !isWordByte(rest[i+len(name)])
		if before && after {
			return true
		}
		rest = rest[i+len(name):]
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// assemble reads lua/<file> and gives it the library's pieces it names,
// and those they name. Only the named ones: a local function costs a
// closure at every run of the script (0.03µs of the server's CPU on
// Redis 7.0, 0.035µs more an upvalue: up to 1-2% of a lock's script of
// 5-15µs; see docs/BENCHMARKS.md). For the same reason a piece of functions is defined
// just before the first statement of the file that names it (with that
// statement's comment), not in front: a run that returns earlier, as an
// extend that found its lock held returns before its repair, makes no
// closure of the functions only the rest of the file calls. The pieces of
// statements (the clock) and the functions the file's first statement
// needs go in front, in the library's order.
//
// It also gives the two parts of the batched form (batchSrc): every piece
// in the library's order (lib), defined once for the run's calls, then the
// file (body), and where the batched form's lines come from.
func assemble(file string) (s *script, lib, body string, batchLines []lineRun) {
	body = mustRead(file)
	want := map[string]bool{} // by a piece's first name
	code := luaCode(body)
	for i := len(library) - 1; i >= 0; i-- { // a piece needs only earlier ones
		p := library[i]
		if want[p.names[0]] || namesAny(code, p.names) {
			want[p.names[0]] = true
			for _, n := range p.needs {
				want[n] = true
			}
		}
	}
	bodyLines := strings.SplitAfter(body, "\n")
	// at: the line of the file (from 0) before which each piece goes.
	at := map[string]int{}
	for _, p := range library {
		if want[p.names[0]] {
			at[p.names[0]] = len(bodyLines) // named only by other pieces: see below
			if !p.fn {
				at[p.names[0]] = 0
			} else if n := firstNaming(bodyLines, p.names); n >= 0 {
				at[p.names[0]] = statementStart(bodyLines, n)
			}
		}
	}
	for i := len(library) - 1; i >= 0; i-- { // before the pieces that need it
		p := library[i]
		if want[p.names[0]] {
			for _, n := range p.needs {
				at[n] = min(at[n], at[p.names[0]])
			}
		}
	}
	var pieces, src strings.Builder
	var lines []lineRun
	from := 0 // the file's lines written so far
	for n := 0; n <= len(bodyLines); n++ {
		for _, p := range library {
			if !want[p.names[0]] || at[p.names[0]] != n {
				continue
			}
			if n > 0 {
				checkCapture(file, p, bodyLines[:n])
			}
			if n > from {
				src.WriteString(strings.Join(bodyLines[from:n], ""))
				lines = append(lines, lineRun{file, from + 1, n - from})
				from = n
			}
			src.WriteString(p.text)
			lines = append(lines, lineRun{"lib.lua", p.first, p.last - p.first + 1})
		}
	}
	src.WriteString(strings.Join(bodyLines[from:], ""))
	lines = append(lines, lineRun{file, from + 1, len(bodyLines) - from})
	for _, p := range library {
		if want[p.names[0]] {
			pieces.WriteString(p.text)
			batchLines = append(batchLines, lineRun{"lib.lua", p.first, p.last - p.first + 1})
		}
	}
	batchLines = append(batchLines, lineRun{file, 1, len(bodyLines)})
	return &script{file: file, src: src.String(), srcArg: src.String(), lines: lines}, pieces.String(), body, batchLines
}

// firstNaming is the first of lines (from 0) whose code names any of
// names, -1 if none does.
func firstNaming(lines []string, names []string) int {
	for n, l := range lines {
		if namesAny(luaCode(l), names) {
			return n
		}
	}
	return -1
}

// statementStart is the first line (from 0) of the file's statement that
// line n belongs to, and of the comment right above it. The files are
// indented: a statement of the file's own block starts at column 1, and a
// line at column 1 that starts with end, else, elseif or until goes on
// the statement before it.
func statementStart(lines []string, n int) int {
	for ; n > 0; n-- {
		l := lines[n]
		if l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '\n' || strings.HasPrefix(l, "--") {
			continue
		}
		word := l
		if i := strings.IndexFunc(l, func(r rune) bool { return r > 127 || !isWordByte(byte(r)) }); i >= 0 {
			word = l[:i]
		}
		if word != "end" && word != "else" && word != "elseif" && word != "until" {
			break
		}
	}
	for n > 0 && strings.HasPrefix(lines[n-1], "--") {
		n--
	}
	return n
}

// checkCapture panics when piece p, placed after the file's lines before,
// names a local those lines declare, other than its own: it would take
// the file's local for the one it means (a global, or an earlier piece's).
func checkCapture(file string, p libPiece, before []string) {
	code := luaCode(p.text)
	own := map[string]bool{}
	for _, name := range luaLocals(code) {
		own[name] = true
	}
	for _, name := range luaLocals(luaCode(strings.Join(before, ""))) {
		if !own[name] && usesName(code, name) {
			panic(fmt.Sprintf("redlock: lua/lib.lua:%d-%d, placed in lua/%s after its local %s, names it", p.first, p.last, file, name))
		}
	}
}

// luaLocals are the names code declares: its locals, its functions'
// parameters and its loops' variables.
func luaLocals(code string) []string {
	var names []string
	for _, re := range luaDecls {
		for _, m := range re.FindAllStringSubmatch(code, -1) {
			names = append(names, strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' })...)
		}
	}
	return names
}

var luaDecls = []*regexp.Regexp{
	regexp.MustCompile(`\blocal\s+(?:function\s+)?([A-Za-z_][\w ,]*)`),
	regexp.MustCompile(`\bfunction\b[^(\n]*\(([^)]*)\)`),
	regexp.MustCompile(`\bfor\s+([A-Za-z_][\w ,]*?)\s*(?:=|\bin\b)`),
}
