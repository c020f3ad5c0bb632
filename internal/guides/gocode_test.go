package guides

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// compile builds the whole-file Go blocks as packages of this module, each
// in a directory of its own that exists only in an overlay (go help
// build, -overlay), so that the blocks import the module's packages as a
// user's program imports them. A block that stops compiling fails here.
func compile(t *testing.T, files []block) {
	t.Helper()
	goCmd := goCommand(t)
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, b := range files {
		src := filepath.Join(tmp, strconv.Itoa(i)+".go")
		if err := os.WriteFile(src, []byte(b.text), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := "internal/guides/_blocks/" + strconv.Itoa(i)
		replace[filepath.Join(abs, dir, "block.go")] = src
		pkgs = append(pkgs, "./"+dir)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	// Several packages built at once: go build checks them and writes nothing.
	cmd := exec.Command(goCmd, append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Name each block in the errors by its guide and line.
	msg := string(out)
	for i, b := range files {
		for _, name := range []string{filepath.Join(tmp, strconv.Itoa(i)+".go"), "internal/guides/_blocks/" + strconv.Itoa(i) + "/block.go"} {
			msg = strings.ReplaceAll(msg, name+":", b.String()+", block line ")
		}
	}
	t.Errorf("go build of the guides' Go programs: %v\n%s", err, msg)
}

// goCommand returns the go command's path; without it nothing compiles,
// and the test says so rather than passing.
func goCommand(t *testing.T) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the guides' blocks: %v", err)
	}
	return goCmd
}

// elision is an excerpt's line that stands for any number of lines.
var elision = regexp.MustCompile(`^(//|#) \.\.\.`)

// checkExcerpt checks that a block marked as an excerpt (a Go block that is
// no whole file must be) appears in the file its excerpt line names: each of
// its lines, spaces around it aside, is a line of that file, in order and
// next to the one before, but for a "// ..." or "# ..." line, which skips
// any number. The file is one of the repository (a Go file, which go test
// compiles; a file a test loads) or a guide, whose whole Go blocks
// TestGuideBlocks compiles; so an excerpt changed alone fails.
func checkExcerpt(t *testing.T, b block) {
	t.Helper()
	if b.excerpt == "" {
		t.Errorf("%s: a Go block that is not a whole file (package ...) needs a line <!-- excerpt of PATH --> before it", b)
		return
	}
	var sources []string
	if strings.HasSuffix(b.excerpt, ".md") {
		for _, s := range blocksOf(t, b.excerpt) {
			if s.lang == "go" && s.complete() {
				sources = append(sources, s.text)
			}
		}
	} else {
		src, err := os.ReadFile(filepath.Join(root, b.excerpt))
		if err != nil {
			t.Errorf("%s: %v", b, err)
			return
		}
		sources = []string{string(src)}
	}
	frag := lines(b.text)
	for _, src := range sources {
		if matchFrom(frag, lines(src)) {
			return
		}
	}
	t.Errorf("%s is not an excerpt of %s: each line, in order, must be one of its lines (\"// ...\" or \"# ...\" skipping any):\n%s", b, b.excerpt, b.text)
}

// lines returns the non-blank lines of s, spaces around each trimmed.
func lines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		if t := strings.TrimSpace(line); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// matchFrom reports whether frag matches src at some line.
func matchFrom(frag, src []string) bool {
	for i := range src {
		if match(frag, src[i:]) {
			return true
		}
	}
	return false
}

// match reports whether frag matches the start of src.
func match(frag, src []string) bool {
	if len(frag) == 0 {
		return true
	}
	if elision.MatchString(frag[0]) {
		for i := 0; i <= len(src); i++ {
			if match(frag[1:], src[i:]) {
				return true
			}
		}
		return false
	}
	return len(src) > 0 && src[0] == frag[0] && match(frag[1:], src[1:])
}
