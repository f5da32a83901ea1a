package redlock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// coreFiles are the files of the Redlock core: the attempt, the quorum
// decision, the wait, the durable step, the release, fencing and renewal.
// They reach every primitive through the lockKind seam (kind.go) and must
// not know which primitives exist.
var coreFiles = []string{"quorum.go", "redlock.go", "acquire.go", "node.go", "guard.go", "probe.go", "lock.go", "pipe.go", "wait.go", "durable.go", "fencing.go", "renew.go"}

// primitiveWords are the words that name one primitive or its parts. A
// core file that uses one in an identifier or a string branches on that
// primitive, or holds a piece of it.
var primitiveWords = map[string]bool{
	"semaphore": true, "semaphores": true, "sem": true, "permit": true, "permits": true,
	"fair": true, "fairness": true,
	"rw": true, "rwlock": true, "rlock": true, "wlock": true, "reader": true, "readers": true, "writer": true, "writers": true,
}

// primitivePhrases name a primitive in prose (strings only).
var primitivePhrases = regexp.MustCompile(`(?i)\bread[- ]?write\b|\b(read|write) lock\b`)

// words splits an identifier or a string into lower-case words: at
// non-letters and at camelCase humps ("rwReadAcquire" -> rw, read, acquire;
// "fairKind" -> fair, kind; "RWLock" -> rw, lock).
func words(s string) []string {
	var out []string
	rs := []rune(s)
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, strings.ToLower(string(rs[start:end])))
		}
		start = -1
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		prev := rs[i-1]
		upper := unicode.IsUpper(r)
		switch {
		case upper && unicode.IsLower(prev): // fairKind: a new word at K
			flush(i)
			start = i
		case upper && unicode.IsUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1]): // RWLock: a new word at L
			flush(i)
			start = i
		}
	}
	flush(len(rs))
	return out
}

// primitiveNames lists every identifier and string of file that names a
// primitive, as "file:line: text".
func primitiveNames(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	report := func(pos token.Pos, what string) {
		found = append(found, fset.Position(pos).String()+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			for _, w := range words(n.Name) {
				if primitiveWords[w] {
					report(n.Pos(), n.Name)
					break
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				s = n.Value
			}
			hit := primitivePhrases.MatchString(s)
			for _, w := range words(s) {
				hit = hit || primitiveWords[w]
			}
			if hit {
				report(n.Pos(), n.Value)
			}
		}
		return true
	})
	return found
}

// TestCoreNamesNoPrimitive keeps the seam: the core files ask a lock's kind
// what to do (kind.go) and never name a primitive. A new primitive is a new
// kind in a file of its own, not a branch in the core.
func TestCoreNamesNoPrimitive(t *testing.T) {
	total := 0
	for _, file := range coreFiles {
		for _, hit := range primitiveNames(t, file) {
			t.Error(hit)
			total++
		}
	}
	if total > 0 {
		t.Errorf("%d primitive names in the core files: move them into the primitive's kind (kind.go)", total)
	}
}

func TestWordsSplitsNames(t *testing.T) {
	for in, want := range map[string]string{
		"rwReadAcquireScript": "rw read acquire script",
		"fairKind":            "fair kind",
		"RWLock":              "rw lock",
		"a.permits":           "a permits",
		"semaphoreTopic":      "semaphore topic",
		"WithFairness":        "with fairness",
		"\x00permits":         "permits",
	} {
		if got := strings.Join(words(in), " "); got != want {
			t.Errorf("words(%q) = %q, want %q", in, got, want)
		}
	}
}
