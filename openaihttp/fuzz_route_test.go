package openaihttp

import (
	"strings"
	"testing"
)

// FuzzRouteOf matches any path against routes and the package's own rules
// as a plain reading of them would (the path's segments in a slice, the
// first route that matches, else the first endpoint whose segments end the
// path under the longest base that ends the rest): the same API, pattern
// and model, for paths of any length (routeOf holds only the first and
// last 16 segments).
func FuzzRouteOf(f *testing.F) {
	for _, p := range []string{
		"/v1/chat/completions", "//openai/deployments/d/chat/completions/", "/gw/openai/deployments/d/embeddings",
		"/serving/m/generate", "/ai/run/@cf/meta/llama", "/ai/run", "/t/u/v/invoke/x/y", "/x/v1/messages",
		strings.Repeat("/a", 40) + "/v1/chat/completions", "/ai/run" + strings.Repeat("/m", 30),
		"/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p", "/{model}/chat/completions", "",
	} {
		f.Add(p)
	}
	routes := []Route{}
	for _, r := range [][2]string{
		{"/serving/{model}/generate", "chat"}, {"/ai/run/{model...}", "chat"},
		{"/{tenant...}/invoke/{x}/{deployment}", "completions"}, {"/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/{p}", "embeddings"},
		{"/survey/responses", "none"},
	} {
		rt, err := NewRoute(r[0], r[1])
		if err != nil {
			f.Fatal(err)
		}
		routes = append(routes, rt)
	}
	f.Fuzz(func(t *testing.T, path string) {
		got, ok := routeOf(path, routes)
		want, wantOK := plainRouteOf(path, routes)
		if ok != wantOK || got != want {
			t.Errorf("routeOf(%q) = %+v %v, want %+v %v", path, got, ok, want, wantOK)
		}
	})
}

// plainRouteOf is routeOf written plainly.
func plainRouteOf(path string, routes []Route) (route, bool) {
	segs := split(path)
	for _, r := range routes {
		before, after := split(r.pattern), []string(nil)
		multi := -1
		for i, s := range before {
			if strings.HasSuffix(s, "...}") {
				multi, before, after = i, before[:i], before[i+1:]
				break
			}
		}
		if multi < 0 && len(segs) != len(before) || len(segs) < len(before)+len(after) {
			continue
		}
		m1, ok1 := plainMatch(before, segs[:len(before)])
		m2, ok2 := plainMatch(after, segs[len(segs)-len(after):])
		if !ok1 || !ok2 {
			continue
		}
		model := m1 + m2
		if multi >= 0 && isModel(r.multi) && len(segs) > len(before)+len(after) {
			model = strings.Join(segs[len(before):len(segs)-len(after)], "/")
		}
		return route{api: r.api, pattern: r.pattern, model: pathModel(model)}, true
	}
	for i, e := range endpoints {
		suffix := split(e.suffix)
		if len(segs) < len(suffix) || strings.Join(segs[len(segs)-len(suffix):], "/") != strings.Join(suffix, "/") {
			continue
		}
		rest := segs[:len(segs)-len(suffix)]
		for j, base := range bases {
			b := split(base)
			if len(rest) < len(b) {
				continue
			}
			if model, ok := plainMatch(b, rest[len(rest)-len(b):]); ok {
				return route{api: e.api, pattern: builtin.labels[j][i][min(len(rest)-len(b), 1)], model: pathModel(model)}, true
			}
		}
	}
	return route{}, false
}

// plainMatch matches pattern segments without {name...} to as many path
// segments.
func plainMatch(pattern, segs []string) (model string, ok bool) {
	for i, p := range pattern {
		switch {
		case strings.HasPrefix(p, "{"):
			if isModel(strings.Trim(p, "{}")) {
				model = segs[i]
			}
		case p != segs[i]:
			return "", false
		}
	}
	return model, true
}

// Matching a path allocates nothing, whatever its length: a request's
// route costs no garbage.
func TestRouteOfAllocatesNothing(t *testing.T) {
	r, err := NewRoute("/serving/{model}/generate", "chat")
	if err != nil {
		t.Fatal(err)
	}
	routes := []Route{r}
	for _, p := range []string{"/v1/chat/completions", "/openai/deployments/gpt-4o/chat/completions", "/serving/m/generate",
		"/v1/models", strings.Repeat("/a", 1000) + "/v1/chat/completions"} {
		if n := testing.AllocsPerRun(100, func() { routeOf(p, routes) }); n != 0 {
			t.Errorf("%.40s: %v allocations", p, n)
		}
	}
}

func BenchmarkRouteOf(b *testing.B) {
	r, err := NewRoute("/serving/{model}/generate", "chat")
	if err != nil {
		b.Fatal(err)
	}
	routes := []Route{r}
	for _, p := range []string{"/v1/chat/completions", "/openai/deployments/gpt-4o/chat/completions", "/v1/models"} {
		b.Run(strings.ReplaceAll(p[1:], "/", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				routeOf(p, routes)
			}
		})
	}
}

// The bases are tried longest first, so that a path takes the longest
// that ends its prefix (/openai/v1 before /v1).
func TestBasesLongestFirst(t *testing.T) {
	for i := 1; i < len(bases); i++ {
		if len(split(bases[i])) > len(split(bases[i-1])) {
			t.Errorf("base %q after the shorter %q", bases[i], bases[i-1])
		}
	}
}
