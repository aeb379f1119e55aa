package notifyd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// publicPackages are the packages applications and embedding programs
// import, by directory.
var publicPackages = []string{".", "channels", "config", "server", "notifytype", "templates"}

// engineImport reports whether an import path is one of notifyd's engine or
// internal packages, which a public package may use but never expose.
func engineImport(path string) bool {
	const mod = "github.com/notifyd/notifyd/"
	rest, ok := strings.CutPrefix(path, mod)
	if !ok {
		return false
	}
	return rest == "stores" || rest == "jobs" || strings.HasPrefix(rest, "internal/") || strings.Contains(rest, "/internal/")
}

// TestPublicPackagesExposeNoEngineTypes: no exported function, method, type,
// field, variable or constant of a public package mentions a type of stores,
// jobs or an internal package, so they can change without breaking users.
func TestPublicPackagesExposeNoEngineTypes(t *testing.T) {
	t.Parallel()
	for _, dir := range publicPackages {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			imports := map[string]string{} // local name -> path
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				local := filepath.Base(path)
				if imp.Name != nil {
					local = imp.Name.Name
				}
				imports[local] = path
			}
			report := func(what string, n ast.Node) {
				ast.Inspect(n, func(x ast.Node) bool {
					sel, ok := x.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && engineImport(imports[id.Name]) {
						t.Errorf("%s: %s exposes %s.%s (%s)", fset.Position(sel.Pos()), what, id.Name, sel.Sel.Name, imports[id.Name])
					}
					return true
				})
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
						continue
					}
					report(d.Name.Name, d.Type)
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							exposedFields(s.Type, func(n ast.Node) { report(s.Name.Name, n) })
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Type != nil {
									report(n.Name, s.Type)
								}
							}
						}
					}
				}
			}
		}
		if checked == 0 {
			t.Errorf("%s: no Go files", dir)
		}
	}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(fl *ast.FieldList) bool {
	if len(fl.List) == 0 {
		return false
	}
	x := fl.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if ix, ok := x.(*ast.IndexExpr); ok {
		x = ix.X
	}
	id, ok := x.(*ast.Ident)
	return ok && id.IsExported()
}

// exposedFields calls fn with the parts of a type declaration a user can
// reach: the whole type, except a struct's unexported fields and an
// interface's unexported methods.
func exposedFields(typ ast.Expr, fn func(ast.Node)) {
	var fields *ast.FieldList
	switch t := typ.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		fn(typ)
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 { // embedded
			fn(f.Type)
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				fn(f.Type)
				break
			}
		}
	}
}

// TestEngineDoesNotImportTheAPI: the engine (jobs) and the stores speak the
// leaf package notifytype, never the application-facing root package.
func TestEngineDoesNotImportTheAPI(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"jobs", "stores", "channels", "templates"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				if imp.Path.Value == `"github.com/notifyd/notifyd"` {
					t.Errorf("%s imports the root package notifyd", name)
				}
			}
		}
	}
}

// TestTemplatesStandsBelowConfigAndChannels: the template package is what
// the config loader parses with and what channels and jobs render with, so
// it stands below all of them: of notifyd it imports only the leaf
// notifytype. (Rendering once lived in config, and channels reached into
// the loader to render a message.)
func TestTemplatesStandsBelowConfigAndChannels(t *testing.T) {
	t.Parallel()
	const mod = "github.com/notifyd/notifyd"
	files, err := filepath.Glob(filepath.Join("templates", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: no Go files (%v)", err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if (path == mod || strings.HasPrefix(path, mod+"/")) && path != mod+"/notifytype" {
				t.Errorf("%s imports %s: templates may import only notifytype of notifyd", name, path)
			}
		}
	}
}

// TestFuzzCorporaSitBesideTheirTargets: go test reads a fuzz target's corpus
// from testdata/fuzz/<Target> in the target's own package directory, and
// nowhere else. A corpus anywhere else is never run; this fails naming it.
func TestFuzzCorporaSitBesideTheirTargets(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("*/testdata/fuzz/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{"testdata/fuzz/*", "*/*/testdata/fuzz/*", "*/*/*/testdata/fuzz/*"} {
		more, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, more...)
	}
	for _, dir := range dirs {
		if strings.Contains(dir, "node_modules") {
			continue
		}
		target := filepath.Base(dir)
		pkg := filepath.Dir(filepath.Dir(filepath.Dir(dir)))
		tests, err := filepath.Glob(filepath.Join(pkg, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, name := range tests {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "func "+target+"(") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: package %s has no fuzz target %s, so go test never reads this corpus; move it beside its target", dir, pkg, target)
		}
	}
}

// layers are the floors of the module, lowest first, by package directory (a
// directory stands for the packages below it unless one of those is listed
// itself). A package imports only packages of lower floors, or of its own
// directory's family (channels/apns imports channels), so no import runs back
// up: the engine never reaches the daemon, the stores never reach the engine,
// and a test kit sits above what it tests (server/servertest), never below it.
// A new package goes on a floor here, or the test fails naming it.
var layers = [][]string{
	{"notifytype", "sql", "stores/uuidv7", "channels/unsubscribe", "channels/deliverytag", "clients/browser",
		"internal/metrics", "internal/version", "internal/pgcluster", "internal/smtpcapture", "cmd/notifyd/internal/gentypes",
		"internal/testing/pushtest", "internal/testing/badparams", "internal/testing/oidctest"},
	{"templates", "web"},
	{"stores", "config"},
	{"channels", "internal/wire", "internal/providerevents"},
	{".", "jobs", "internal/testing/pgtest", "internal/testing/mobilepushtest"},
	{"internal/httpapi", "internal/stream", "cmd/notifyd/internal/devmode"},
	{"server"},
	{"server/servertest", "cmd", "bench", "examples", "deploy", "clients"},
}

// floorOf returns the floor of the package in dir and the listed directory
// it falls under; -1 when it is on none.
func floorOf(dir string) (int, string) {
	best, floor := "", -1
	for i, l := range layers {
		for _, d := range l {
			if (dir == d || d != "." && strings.HasPrefix(dir, d+"/")) && len(d) >= len(best) {
				best, floor = d, i
			}
		}
	}
	return floor, best
}

// TestImportsPointDown: every import of one of the module's packages by
// another (tests aside) goes to a lower floor of layers, or stays within a
// listed directory's family.
func TestImportsPointDown(t *testing.T) {
	t.Parallel()
	const mod = "github.com/notifyd/notifyd"
	seen := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		from, fromDir := floorOf(dir)
		if from < 0 {
			t.Errorf("%s: package %s is on no floor of layers: add it", path, dir)
			return nil
		}
		seen++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != mod && !strings.HasPrefix(p, mod+"/") {
				continue
			}
			target := strings.TrimPrefix(strings.TrimPrefix(p, mod), "/")
			if target == "" {
				target = "."
			}
			to, toDir := floorOf(target)
			if to < from || toDir == fromDir && to == from {
				continue
			}
			t.Errorf("%s imports %s: floor %d (%s) reaches up to floor %d (%s)", path, target, from, fromDir, to, toDir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 {
		t.Fatalf("read %d files: the walk missed the module", seen)
	}
}
