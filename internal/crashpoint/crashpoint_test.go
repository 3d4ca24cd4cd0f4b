package crashpoint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPointIsPlacedAndSwept: each point named here is reached by
// code that ships (a crashpoint.Here call) and armed by a sweep test, so
// a new point cannot be left out of the sweep, nor a sweep row point at
// nothing.
func TestEveryPointIsPlacedAndSwept(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "doc.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if n.Name != "ArmFile" {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d points in doc.go: %v", len(names), names)
	}
	placed, swept := map[string]int{}, map[string]int{}
	root := filepath.Join("..", "..")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.Contains(path, "internal/crashpoint") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range names {
			uses := strings.Count(string(b), "crashpoint."+n+")") + strings.Count(string(b), "crashpoint."+n+",")
			switch {
			case strings.HasSuffix(path, "crash_test.go"):
				swept[n] += uses
			case !strings.HasSuffix(path, "_test.go"):
				placed[n] += strings.Count(string(b), "crashpoint.Here(crashpoint."+n+")")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if placed[n] != 1 {
			t.Errorf("crashpoint.%s is placed %d times in the code, want once", n, placed[n])
		}
		if swept[n] == 0 {
			t.Errorf("crashpoint.%s is armed by no sweep test (test/e2e/crash_test.go, test/integration/crash_test.go)", n)
		}
	}
}
