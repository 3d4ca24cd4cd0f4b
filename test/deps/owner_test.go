package deps

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

// ownerPkg is the one package that starts and stops this host's etcd,
// writes its environment file and moves its binary link
// (internal/localetcd: the host lock's owner).
const ownerPkg = "internal/localetcd"

// ownerViolations lists, in one Go file's source, what only ownerPkg may
// do: start or stop etcd through a Service (member.Deps' service
// manager), write a file named by an EnvFile setting, or touch the
// binary link (CurrentLink).
func ownerViolations(fset *token.FileSet, f *ast.File, src []byte) []string {
	var out []string
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		where := fset.Position(call.Pos()).String()
		if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "Service" && (sel.Sel.Name == "Start" || sel.Sel.Name == "Stop") {
			out = append(out, where+": "+text(call)+" starts or stops etcd (use localetcd.Start/Stop)")
		}
		if sel.Sel.Name == "CurrentLink" {
			out = append(out, where+": "+text(call)+" touches the binary link (use localetcd.Use)")
		}
		if x, ok := sel.X.(*ast.Ident); ok && len(call.Args) > 0 && strings.Contains(text(call.Args[0]), "EnvFile") &&
			(x.Name == "atomicfile" && sel.Sel.Name == "Write" || x.Name == "os" && (sel.Sel.Name == "WriteFile" || sel.Sel.Name == "Create" || sel.Sel.Name == "OpenFile" || sel.Sel.Name == "Rename" || sel.Sel.Name == "Remove")) {
			out = append(out, where+": "+text(call)+" writes etcd's environment file (use localetcd.WriteEnv)")
		}
		return true
	})
	return out
}

// TestOneOwnerOfTheLocalEtcd: no package but internal/localetcd starts or
// stops etcd, writes etcd.env or moves /opt/etcd/current: they all go
// through it, so the host lock and the one-start settings cannot be
// bypassed by a new caller.
func TestOneOwnerOfTheLocalEtcd(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// The service managers are etcd.service's side (the process
			// runner plays the unit in tests); test/ drives hosts.
			if rel == ownerPkg || rel == "internal/service" || rel == "test" || strings.HasPrefix(rel, ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, rel, src, 0)
		if err != nil {
			return err
		}
		checked++
		for _, v := range ownerViolations(fset, f, src) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d files", checked)
	}
}

// TestOwnerRuleCatches: each rule finds what it names (so the test above
// can fail).
func TestOwnerRuleCatches(t *testing.T) {
	src := []byte(`package x
func f() {
	d.Service.Stop(ctx)
	w.d.Service.Start(ctx, true)
	os.Rename(tmp, dir.CurrentLink())
	atomicfile.Write(cfg.EnvFile, b, 0o600, -1, -1)
	os.WriteFile(j.cfg.EnvFile, b, 0o600)
	d.Service.Active(ctx)
	os.WriteFile(other, b, 0o600)
}`)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := ownerViolations(fset, f, src); len(got) != 5 {
		t.Fatalf("found %d violations, want 5 (Stop, Start, the link, two env writes):\n%s", len(got), strings.Join(got, "\n"))
	}
}
