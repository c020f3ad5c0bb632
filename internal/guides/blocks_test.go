// Package guides checks the code blocks and links of README.md and of the
// guides in docs/: a doc line is a test, so every block is compiled, matched
// or checked against the program it names (see docs/testing.md).
package guides

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/internal/sample"
)

// Guides are the files whose every code block and link is checked: the
// README and the guides written for each kind of reader. The generated
// references (metrics.md, monitoring.md) and the notes written by topic
// (design, benchmarks, reliability, migration) are not guides.
var Guides = []string{
	"README.md",
	"docs/engines.md",
	"docs/gateways.md",
	"docs/proxy.md",
	"docs/operators.md",
	"docs/exporting.md",
	"docs/install.md",
	"docs/example.md",
	"docs/testing.md",
	"docs/kubernetes.md",
}

// root is the repository's root, from this package's directory.
const root = "../.."

// block is one fenced code block of a Markdown file.
type block struct {
	file    string // path from the root
	line    int    // line of the opening fence, 1-based
	lang    string
	excerpt string // the PATH of an "<!-- excerpt of PATH -->" line before the fence
	text    string
}

func (b block) String() string { return fmt.Sprintf("%s:%d (%s block)", b.file, b.line, b.lang) }

// complete reports whether a Go block is a whole file, not an excerpt.
func (b block) complete() bool {
	for line := range strings.Lines(b.text) {
		if t := strings.TrimSpace(line); t != "" {
			return strings.HasPrefix(t, "package ")
		}
	}
	return false
}

var excerptMark = regexp.MustCompile(`^<!-- excerpt of (\S+) -->$`)

// blocksOf returns the fenced code blocks of the Markdown file at path (from
// the root).
func blocksOf(t *testing.T, path string) []block {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out  []block
		open *block
		prev string
	)
	for i, line := range strings.Split(string(src), "\n") {
		switch {
		case open == nil && strings.HasPrefix(line, "```"):
			b := block{file: path, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
			if m := excerptMark.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				b.excerpt = m[1]
			}
			open = &b
		case open != nil && strings.TrimSpace(line) == "```":
			out = append(out, *open)
			open = nil
		case open != nil:
			open.text += line + "\n"
		}
		prev = line
	}
	if open != nil {
		t.Errorf("%s: a block opened and never closed", open)
	}
	return out
}

// allBlocks returns the blocks of every guide.
func allBlocks(t *testing.T) []block {
	t.Helper()
	var all []block
	for _, g := range Guides {
		all = append(all, blocksOf(t, g)...)
	}
	return all
}

// TestGuideBlocks checks every code block of the guides by its language: Go
// blocks compile or are excerpts of what compiles, shell commands name
// programs, flags, tests and files that exist, PromQL names exported
// families; a block of any language marked as an excerpt is one of the file
// it names (a YAML file the tests load, say). Any other block fails: give
// it a check first.
//
// It runs without the race detector only: it builds the programs it checks
// (tens of seconds) from one goroutine, where the race detector has nothing
// to watch; scripts/test.sh runs it in its stage without -race.
func TestGuideBlocks(t *testing.T) {
	if sample.Race {
		t.Skip("builds the guides' programs from one goroutine: run without -race")
	}
	var goFiles []block
	langs := map[string]int{}
	for _, b := range allBlocks(t) {
		langs[b.lang]++
		switch {
		case b.lang == "go" || b.excerpt != "":
			if b.complete() {
				goFiles = append(goFiles, b)
			} else {
				checkExcerpt(t, b)
			}
		case b.lang == "sh":
			checkShell(t, b)
		case b.lang == "promql":
			checkPromQL(t, b)
		default:
			t.Errorf("%s: no check for a block of language %q (give it one in internal/guides)", b, b.lang)
		}
	}
	if len(goFiles) == 0 {
		t.Fatal("no guide has a whole Go program")
	}
	compile(t, goFiles)
	t.Logf("blocks checked, by language: %v (%d whole Go programs compiled)", langs, len(goFiles))
}
