package redlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// The documentation's Go code is checked here, so that what a reader pastes
// compiles and runs: every ```go block in the README and the guides is either
// a whole file or an excerpt of a Go file that the build compiles (examples/,
// Example tests), and TestExamplesRun runs every program in examples/ against
// real servers.

// docFiles are the Markdown files whose Go blocks and links are checked:
// every one in the repository (the README, the guides in docs/, the nested
// modules' READMEs).
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "reports" || d.Name() == "results") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// codeBlock is one fenced block of a Markdown file, with the marker comment
// that precedes it ("" if none).
type codeBlock struct {
	file   string
	line   int // of the opening fence
	lang   string
	marker string
	body   []string
}

var markerRe = regexp.MustCompile(`^<!--\s*(file|from):\s*(\S+)\s*-->$`)

func codeBlocks(t *testing.T, path string) []codeBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []codeBlock
		cur     *codeBlock
		fence   string
		lastTxt string // the last non-blank line outside a block
	)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == fence {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.body = append(cur.body, line)
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			fence = trimmed[:strings.LastIndex(trimmed, "`")+1]
			cur = &codeBlock{file: path, line: n, lang: strings.TrimSpace(trimmed[len(fence):])}
			if markerRe.MatchString(lastTxt) {
				cur.marker = lastTxt
			}
			continue
		}
		if trimmed != "" {
			lastTxt = trimmed
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: code block never closed", path, cur.line)
	}
	return blocks
}

// dedent removes the indentation that every non-blank line shares, in the
// indented block of a list item as at the top level of a file.
func dedent(lines []string) []string {
	prefix := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = ind, false
			continue
		}
		for !strings.HasPrefix(ind, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(strings.TrimPrefix(l, prefix), " \t")
	}
	return out
}

// excerptOf reports whether block, dedented, is a run of consecutive lines
// of file, dedented alike.
func excerptOf(block, file []string) bool {
	want := strings.Join(dedent(block), "\n")
	for i := 0; i+len(block) <= len(file); i++ {
		if strings.Join(dedent(file[i:i+len(block)]), "\n") == want {
			return true
		}
	}
	return false
}

func TestDocsCodeBlocks(t *testing.T) {
	checked := 0
	for _, doc := range docFiles(t) {
		for _, b := range codeBlocks(t, doc) {
			if b.lang != "go" {
				continue
			}
			where := fmt.Sprintf("%s:%d", b.file, b.line)
			m := markerRe.FindStringSubmatch(b.marker)
			if m == nil {
				t.Errorf("%s: a Go block needs <!-- file: PATH --> or <!-- from: PATH --> on the line before it, naming a Go file that compiles and runs in the tests (examples/, an Example test)", where)
				continue
			}
			kind, src := m[1], m[2]
			if !strings.HasSuffix(src, ".go") {
				t.Errorf("%s: %s is not a Go file", where, src)
				continue
			}
			data, err := os.ReadFile(filepath.FromSlash(src))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			body := strings.Join(b.body, "\n") + "\n"
			switch kind {
			case "file":
				if body != string(data) {
					t.Errorf("%s: the block is not %s as it stands: copy the file into the block again", where, src)
				}
			case "from":
				if !excerptOf(b.body, strings.Split(string(data), "\n")) {
					t.Errorf("%s: the block is not a run of consecutive lines of %s: copy them from the file again", where, src)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no Go block found: the parser is broken")
	}
}

// guardOff matches the options that turn one of the library's safety guards
// off. An example that uses one must say, in a comment on that line or the
// line before, why it is safe there: examples are what readers copy.
var guardOff = regexp.MustCompile(`\b(NoRestartGrace|NoClockGuard|AllowNoFaultTolerance|AllowFailoverNodes|DisableFencing)\b`)

func TestExamplesExplainGuardsTurnedOff(t *testing.T) {
	check := func(where string, lines []string) {
		for i, l := range lines {
			code, _, _ := strings.Cut(l, "//")
			if !guardOff.MatchString(code) {
				continue
			}
			commented := strings.Contains(l, "//")
			if i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "//") {
				commented = true
			}
			if !commented {
				t.Errorf("%s:%d: %q turns a guard off without a comment saying why it is safe there", where, i+1, strings.TrimSpace(l))
			}
		}
	}
	files, err := filepath.Glob("examples/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("*example_test.go")
	files = append(files, more...)
	more, _ = filepath.Glob("*/example_test.go")
	files = append(files, more...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check(f, strings.Split(string(data), "\n"))
	}
	for _, doc := range docFiles(t) {
		for _, b := range codeBlocks(t, doc) {
			if b.lang == "go" {
				check(fmt.Sprintf("%s (block at line %d)", b.file, b.line), b.body)
			}
		}
	}
}

// TestExamplesRun builds every program in examples/ and runs it against three
// fresh lock nodes and a fourth server as the resource or cache, as a reader
// would after starting local servers. The nodes are fresh, so the first
// program waits out their restart grace (the examples' 2s TTL): that is what
// a reader sees too.
func TestExamplesRun(t *testing.T) {
	dirs, err := filepath.Glob("examples/*/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no example found")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin+string(filepath.Separator), "./examples/...")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/...: %v\n%s", err, out)
	}

	locks := redistest.StartT(t, 3, redistest.Options{})
	resource := redistest.StartT(t, 1, redistest.Options{})
	env := append(os.Environ(),
		"REDLOCK_NODES="+strings.Join(locks.URLs(), ","),
		"REDLOCK_RESOURCE="+resource.URLs()[0],
		"REDLOCK_CACHE="+resource.URLs()[0],
	)
	for _, d := range dirs {
		name := filepath.Base(filepath.Dir(d))
		t.Run(name, func(t *testing.T) {
			// Bounded: the first program waits out the fresh nodes' grace
			// (about 3s); none should take a minute.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, name))
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("examples/%s ran for over a minute:\n%s", name, out)
			}
			if err != nil {
				t.Fatalf("examples/%s: %v\n%s", name, err, out)
			}
			if len(strings.TrimSpace(string(out))) == 0 {
				t.Fatalf("examples/%s printed nothing", name)
			}
			t.Logf("examples/%s:\n%s", name, out)
		})
	}
}

// linkRe matches a Markdown link's target, outside code.
var linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is GitHub's anchor for a heading: lower case, letters, digits,
// spaces as hyphens, hyphens and underscores kept, the rest dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the headings' anchors of a Markdown file.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	out := map[string]bool{}
	inFence := false
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		s := slug(strings.TrimSpace(strings.TrimLeft(l, "#")))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestDocsLinks checks that every relative link of the README, the guides
// and the other READMEs names a file that exists, and a heading that exists
// when it names one: the guides were moved out of the README, and a link
// that still points at a section that moved leads nowhere.
func TestDocsLinks(t *testing.T) {
	for _, doc := range docFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for n, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				inFence = !inFence
			}
			if inFence {
				continue
			}
			for _, m := range linkRe.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", doc, n+1, target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
					t.Errorf("%s:%d: link to %s: %s has no heading #%s", doc, n+1, target, path, anchor)
				}
			}
		}
	}
}

// TestREADMEStaysShort keeps the README what a new user reads in ten
// minutes (issue 28): at most 350 lines, opening with the two commands,
// naming the licence that LICENSE holds. What grows goes to docs/.
func TestREADMEStaysShort(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if n := strings.Count(readme, "\n"); n > 350 {
		t.Errorf("README.md has %d lines, more than 350: move the detail to a guide in docs/", n)
	}
	var commands []string
	for _, b := range codeBlocks(t, "README.md") {
		for _, l := range b.body {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "make" {
				commands = append(commands, f[0]+" "+f[1])
			}
		}
		break // the first block only
	}
	if strings.Join(commands, ", ") != "make demo, make test" {
		t.Errorf("the README's first block runs %q, want make demo, then make test", commands)
	}
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(license), "Apache License") || !strings.Contains(string(license), "Version 2.0, January 2004") {
		t.Error("LICENSE does not hold the Apache License 2.0")
	}
	if !strings.Contains(readme, "Apache License 2.0") {
		t.Error("README.md does not name the licence")
	}
}

// The README's first program, run on servers started a moment ago, first
// says what it waits for (the fresh nodes' restart grace: how long, and
// why), as the README shows, and then takes the lock: a new user does not
// sit through the grace in silence (issue 28). The test awaits the lines in
// the order the user sees them; it asserts no timing.
func TestQuickStartSaysWhatItWaitsFor(t *testing.T) {
	const notice = "WARN redlock: waiting for the restart grace"
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "<!-- file: examples/mutex/main.go -->") || !strings.Contains(string(readme), "\n"+notice+" lock=payout:") {
		t.Fatalf("README.md no longer shows examples/mutex as its first program, with the line %q it logs first: update this test", notice)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "mutex")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./examples/mutex").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/mutex: %v\n%s", err, out)
	}

	// Fresh servers without persistence, as the README starts them. Their
	// grace is the largest TTL in use on them: another client raises it to
	// 8s first, so that the program surely meets it, however long it takes
	// to start on a loaded machine (its own TTL, 2s, gives a short window).
	cl := redistest.StartT(t, 3, redistest.Options{})
	other, err := redlock.NewFromURLs(cl.URLs(), redlock.Options{TTL: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.TryAcquire(ctx, "raise-the-register"); !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Fatalf("a client with an 8s TTL on fresh nodes: %v, want them sitting out the grace", err)
	}

	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "REDLOCK_NODES="+strings.Join(cl.URLs(), ","))
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		exited <- err
	}()
	var lines []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := <-exited; err != nil {
		t.Fatalf("examples/mutex: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if len(lines) < 2 || !strings.Contains(lines[0], notice) || !strings.Contains(lines[0], " wait=") ||
		!strings.Contains(lines[0], "restart grace") || !strings.Contains(lines[0], "without persistence") {
		t.Fatalf("examples/mutex on fresh servers: the first line must say what it waits for (%q, how long, why), got:\n%s", notice, strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[len(lines)-1], "paying out under fencing token ") {
		t.Fatalf("examples/mutex: want the job's line after the notice, got:\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("examples/mutex:\n%s", strings.Join(lines, "\n"))
}

// TestREADMEDescribesMakeTest keeps the README's "What make test does" true
// to what it runs and installs (issue 28: it did more than the README said):
// every package tools/install-deps.sh installs, the service it disables,
// the servers tools/install-servers.sh unpacks and where, every step the
// Makefile's test target takes, every module it tests, and the model
// check's set of rows.
func TestREADMEDescribesMakeTest(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	readme := read("README.md")
	const heading = "## What `make test` does"
	_, section, ok := strings.Cut(readme, heading)
	if !ok {
		t.Fatalf("README.md has no section %q", heading)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	says := func(what, why string) {
		t.Helper()
		if !strings.Contains(section, what) {
			t.Errorf("README.md's %q does not say %q: %s", heading, what, why)
		}
	}

	deps := read("tools/install-deps.sh")
	pkgs := regexp.MustCompile(`need\+=\(([a-z0-9-]+)\)`).FindAllStringSubmatch(deps, -1)
	if len(pkgs) == 0 {
		t.Fatal("found no package in tools/install-deps.sh: the parser is broken")
	}
	for _, m := range pkgs {
		says("`"+m[1]+"`", "tools/install-deps.sh installs it")
	}
	if strings.Contains(deps, "systemctl disable") {
		says("disables", "tools/install-deps.sh disables the system's redis-server service")
	}
	servers := regexp.MustCompile(`"(redis|valkey)-([0-9]+\.[0-9]+) `).FindAllStringSubmatch(read("tools/install-servers.sh"), -1)
	if len(servers) == 0 {
		t.Fatal("found no server in tools/install-servers.sh: the parser is broken")
	}
	for _, m := range servers {
		says(strings.ToUpper(m[1][:1])+m[1][1:]+" "+m[2], "tools/install-servers.sh unpacks it")
	}
	says("~/.cache/redlock/servers", "where tools/install-servers.sh unpacks the servers")

	makefile := read("Makefile")
	target := regexp.MustCompile(`(?m)^test:([^\n]*)\n((?:\t[^\n]*\n)+)`).FindStringSubmatch(makefile)
	if target == nil {
		t.Fatal("found no test target in the Makefile: the parser is broken")
	}
	steps := map[string]string{"deps": "tools/install-deps.sh", "servers": "tools/install-servers.sh", "fmt-check": "gofmt", "vet": "go vet"}
	for _, p := range strings.Fields(target[1]) {
		what, known := steps[p]
		if !known {
			t.Errorf("the Makefile's test target depends on %q, which this test does not know: describe it in README.md and here", p)
			continue
		}
		says(what, "make test runs "+p)
	}
	recipe := target[2]
	if strings.Contains(recipe, "go test -race") {
		says("go test -race", "make test runs the race tests")
	}
	if strings.Contains(recipe, "cd chaos") {
		says("chaos suite", "make test runs the chaos suite")
	}
	if strings.Contains(recipe, "model") {
		says("make model", "make test runs the model check")
		if strings.Contains(read("model/make.mk"), "SET=quick ./model/verify.sh") {
			says("quick rows", "make model runs only the quick rows of the model check")
		}
	}
	mods, err := filepath.Glob("*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("*/*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append(mods, more...) {
		says("`"+filepath.ToSlash(filepath.Dir(m))+"/`", "a nested module that make test vets and tests")
	}
}

// TestDependenciesHaveTheirLicenceListed keeps docs/DEPENDENCIES.md true
// (issue 28: a team checks every dependency's licence before it adopts a
// library): every module that a module of the repository builds or tests
// with has a row there with a licence that Apache-2.0 allows, and the
// library's own rows give the versions its go.mod requires.
func TestDependenciesHaveTheirLicenceListed(t *testing.T) {
	data, err := os.ReadFile("docs/DEPENDENCIES.md")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"Apache-2.0": true, "MIT": true, "BSD-2-Clause": true, "BSD-3-Clause": true, "MPL-2.0": true}
	// module -> its row's cells: the library's table (module, version,
	// licence) comes before the nested modules' (module, licence, users).
	lib, nested := map[string][]string{}, map[string][]string{}
	rows := lib
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "## The nested modules") {
			rows = nested
		}
		cells := strings.Split(strings.Trim(l, "| "), "|")
		if !strings.HasPrefix(l, "| ") || len(cells) < 2 || strings.HasPrefix(l, "|---") {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[cells[0]] = cells
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	mods := []string{"."}
	for _, pattern := range []string{"*/go.mod", "*/*/go.mod"} {
		more, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range more {
			mods = append(mods, filepath.Dir(m))
		}
	}
	for _, m := range mods {
		// What the module builds and tests with (make test's vet step has
		// downloaded it).
		cmd := exec.Command(goTool, "list", "-deps", "-test", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", "./...")
		cmd.Dir = m
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", m, err)
		}
		seen := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			path, version, _ := strings.Cut(l, " ")
			if path == "" || strings.HasPrefix(path, "github.com/quorumlabs/redlock") || seen[path] {
				continue
			}
			seen[path] = true
			rows := nested
			if m == "." {
				rows = lib
			}
			row, ok := rows[path]
			if !ok {
				t.Errorf("module %s builds or tests with %s %s: docs/DEPENDENCIES.md has no row for it in its table: add it with its licence", m, path, version)
				continue
			}
			licence := row[1]
			if m == "." {
				if len(row) < 3 || row[1] != version {
					t.Errorf("docs/DEPENDENCIES.md: the library's row for %s says %q, its go.mod uses %s", path, row[1:], version)
					continue
				}
				licence = row[2]
			}
			if id, _, _ := strings.Cut(licence, " "); !allowed[id] {
				t.Errorf("docs/DEPENDENCIES.md: %s is under %q, which is not one of the licences the library's Apache-2.0 allows", path, licence)
			}
		}
	}
}
