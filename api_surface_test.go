package redlock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds the root package's API before its first tag (issue
// 26): every name is a promise kept for as long as the major version. A
// new name goes in by taking an old one out, or by raising this bound in a
// change that says why.
const maxExported = 120

// exportedNames lists the package's exported top-level names (each name of
// a grouped constant or variable on its own) and the exported methods of
// its exported types, as `go doc -all` shows them.
func exportedNames(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, ".", notTest, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range pkgs["redlock"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					names = append(names, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() {
							names = append(names, spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

func TestTheRootPackageExportsAtMost120Names(t *testing.T) {
	names := exportedNames(t)
	if len(names) == 0 {
		t.Fatal("no exported name found: the parse looked at the wrong files")
	}
	if len(names) > maxExported {
		t.Fatalf("the root package exports %d names, more than %d:\n%s", len(names), maxExported, strings.Join(names, "\n"))
	}
	t.Logf("%d exported names", len(names))
}
