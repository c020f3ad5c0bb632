package guides

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/views"
)

// seriesName matches a family or series name in PromQL: vLLM's, the HTTP
// families' and the router's.
var seriesName = regexp.MustCompile(`\b(vllm:[a-z0-9_:]+|http_request[a-z_]*|router_pd_[a-z_]+)`)

// checkPromQL checks that each family a PromQL block names is one the views
// export (a histogram by its _bucket, _sum or _count series).
func checkPromQL(t *testing.T, b block) {
	t.Helper()
	exported := map[string]bool{}
	for _, list := range [][]views.Family{views.Families(), views.HTTPFamilies(), views.ServerFamilies(), views.ClientFamilies()} {
		for _, f := range list {
			exported[f.ScrapeName()] = true
		}
	}
	names := seriesName.FindAllString(b.text, -1)
	if len(names) == 0 {
		t.Errorf("%s names no family", b)
	}
	for _, n := range names {
		base := n
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if trimmed, ok := strings.CutSuffix(n, s); ok && exported[trimmed] {
				base = trimmed
			}
		}
		if !exported[base] {
			t.Errorf("%s: %s is no family the views export", b, n)
		}
	}
}

// link matches a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestGuideLinks checks that every relative link of the guides names a file
// or directory of the repository, and every #anchor a heading of its page.
func TestGuideLinks(t *testing.T) {
	for _, g := range Guides {
		src, err := os.ReadFile(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				page := g
				if file != "" {
					page = path.Join(path.Dir(g), file)
					if _, err := os.Stat(filepath.Join(root, page)); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", g, i+1, target)
						continue
					}
				}
				if anchor != "" && !hasAnchor(t, page, anchor) {
					t.Errorf("%s:%d: link to %s: %s has no heading with that anchor", g, i+1, target, page)
				}
			}
		}
	}
}

// hasAnchor reports whether the Markdown page has a heading whose anchor,
// as GitHub makes it, is anchor.
func hasAnchor(t *testing.T, page, anchor string) bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for line := range strings.Lines(string(src)) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") && slug(strings.TrimLeft(strings.TrimSpace(line), "#")) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's anchor of a heading: lower case, punctuation but '-' and
// '_' dropped, spaces as '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// maxReadmeLines is how long README.md may be: a page a newcomer reads in a
// few minutes, the rest in the guides (issue 35).
const maxReadmeLines = 200

// TestReadmeShort keeps README.md within maxReadmeLines lines.
func TestReadmeShort(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the details into a guide of docs/", n, maxReadmeLines)
	}
}
