// Package doccheck holds the test that every exported identifier of the
// library's packages has a doc comment.
package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// libraryPackages are the packages whose exported API is documented.
var libraryPackages = []string{"stats", "instrument", "views", "exporters", "testutil", "openaihttp", "pricing"}

// TestExportedIdentifiersHaveDocs fails on an exported type, function,
// method (of an exported type), constant or variable of a library package
// without a doc comment. A constant or variable in a group is documented by
// its own comment, its line comment or the group's.
func TestExportedIdentifiersHaveDocs(t *testing.T) {
	checked := 0
	for _, dir := range libraryPackages {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, missing := range undocumented(f) {
				t.Errorf("%s: exported %s has no doc comment", fset.Position(missing.pos), missing.name)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("checked %d files, want the library's (at least 20)", checked)
	}
}

type missing struct {
	name string
	pos  token.Pos
}

// undocumented returns the exported declarations of f without a doc comment.
func undocumented(f *ast.File) []missing {
	var out []missing
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			if d.Recv != nil && !exportedReceiver(d.Recv) {
				continue
			}
			out = append(out, missing{d.Name.Name, d.Pos()})
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
						out = append(out, missing{s.Name.Name, s.Pos()})
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
							out = append(out, missing{n.Name, n.Pos()})
						}
					}
				}
			}
		}
	}
	return out
}

// exportedReceiver reports a method receiver of an exported type.
func exportedReceiver(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
