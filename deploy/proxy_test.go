package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// proxyDir is the proxy's source, which the chart's checks read so that a
// changed flag, route or drain time there fails them here.
const proxyDir = "../cmd/infermetrics-proxy"

// proxyFacts are what the chart relies on in cmd/infermetrics-proxy.
type proxyFacts struct {
	flags    map[string]bool          // the flags parseConfig defines
	metrics  map[string]bool          // the patterns served on -metrics-listen
	durConst map[string]time.Duration // package-level time.Duration constants
}

// readProxy parses the proxy's config.go and serve.go: the flags are the
// names given to fs.*Var, the metrics routes those given to mux.Handle and
// mux.HandleFunc, the constants those of the form N * time.Unit.
func readProxy(t *testing.T) proxyFacts {
	t.Helper()
	pf := proxyFacts{flags: map[string]bool{}, metrics: map[string]bool{}, durConst: map[string]time.Duration{}}
	fset := token.NewFileSet()
	for _, name := range []string{"config.go", "serve.go"} {
		f, err := parser.ParseFile(fset, filepath.Join(proxyDir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				recv, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				switch {
				case recv.Name == "fs" && strings.HasSuffix(sel.Sel.Name, "Var") && len(n.Args) >= 2:
					if s, ok := stringLit(n.Args[1]); ok {
						pf.flags[s] = true
					}
				case recv.Name == "mux" && (sel.Sel.Name == "Handle" || sel.Sel.Name == "HandleFunc") && len(n.Args) >= 1:
					if s, ok := stringLit(n.Args[0]); ok {
						pf.metrics[s] = true
					}
				}
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i < len(n.Values) {
						if d, ok := duration(n.Values[i]); ok {
							pf.durConst[id.Name] = d
						}
					}
				}
			}
			return true
		})
	}
	if len(pf.flags) < 10 || len(pf.metrics) == 0 {
		t.Fatalf("read %d flags and %d metrics routes from %s: its source no longer has the form this reader knows", len(pf.flags), len(pf.metrics), proxyDir)
	}
	return pf
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// duration evaluates N * time.Unit.
func duration(e ast.Expr) (time.Duration, bool) {
	b, ok := e.(*ast.BinaryExpr)
	if !ok || b.Op != token.MUL {
		return 0, false
	}
	lit, ok := b.X.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		return 0, false
	}
	n, err := strconv.Atoi(lit.Value)
	if err != nil {
		return 0, false
	}
	sel, ok := b.Y.(*ast.SelectorExpr)
	if !ok {
		return 0, false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "time" {
		return 0, false
	}
	unit, ok := map[string]time.Duration{"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute}[sel.Sel.Name]
	return time.Duration(n) * unit, ok
}

// drainAfterDeadline is how long the proxy may still run after
// -shutdown-timeout: the requests cut at the deadline get cutWait to record
// their end, then the metrics flush gets flushTimeout.
func (pf proxyFacts) drainAfterDeadline(t *testing.T) time.Duration {
	t.Helper()
	var d time.Duration
	for _, name := range []string{"cutWait", "flushTimeout"} {
		v, ok := pf.durConst[name]
		if !ok {
			t.Fatalf("constant %s not found in %s (the grace period's check reads it)", name, proxyDir)
		}
		d += v
	}
	return d
}

// TestReadProxy checks the reader on what the proxy is known to have.
func TestReadProxy(t *testing.T) {
	pf := readProxy(t)
	for _, f := range []string{"listen", "metrics-listen", "upstream", "shutdown-timeout", "service-name", "instance-id"} {
		if !pf.flags[f] {
			t.Errorf("flag -%s not found", f)
		}
	}
	if !pf.metrics["/health"] || !pf.metrics["/metrics"] {
		t.Errorf("metrics routes %v: want /health and /metrics", pf.metrics)
	}
	if d := pf.drainAfterDeadline(t); d <= 0 {
		t.Errorf("drain after the deadline %v", d)
	}
}
