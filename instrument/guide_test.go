package instrument_test

import (
	"os"
	"strings"
	"testing"
)

// TestEnginesGuideIsExample keeps the whole program docs/engines.md starts
// from ("Start here") identical to example_use_test.go: its imports, then
// Example's body (without the Output comment) as main's. The file compiles
// with exactly those imports and Example runs under go test, so the guide
// shows a program that compiles and runs, and prints what Example's Output says.
func TestEnginesGuideIsExample(t *testing.T) {
	guide, err := os.ReadFile("../docs/engines.md")
	if err != nil {
		t.Fatal(err)
	}
	_, use, ok := strings.Cut(string(guide), "\n## Start here: a whole program\n")
	_, snippet, ok2 := strings.Cut(use, "```go\n")
	snippet, _, ok3 := strings.Cut(snippet, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/engines.md has no Go code block under ## Start here: a whole program")
	}
	src, err := os.ReadFile("example_use_test.go")
	if err != nil {
		t.Fatal(err)
	}
	imports, ok := between(string(src), "\nimport (\n", "\n)\n")
	body, ok2 := between(string(src), "\nfunc Example() {\n", "\n}\n")
	if !ok || !ok2 {
		t.Fatal("example_use_test.go has no import block or no Example")
	}
	var lines []string
	for line := range strings.Lines(body + "\n") {
		if strings.HasPrefix(line, "\t// Output:") {
			break
		}
		lines = append(lines, line)
	}
	want := "package main\n\nimport (\n" + imports + "\n)\n\nfunc main() {\n" + strings.Join(lines, "") + "}\n"
	if snippet != want {
		t.Errorf("docs/engines.md's whole program is not example_use_test.go as a program:\n%s\nwant:\n%s", snippet, want)
	}
}

// between returns the text of s between the first start and the next end.
func between(s, start, end string) (string, bool) {
	_, rest, ok := strings.Cut(s, start)
	if !ok {
		return "", false
	}
	in, _, ok := strings.Cut(rest, end)
	return in, ok
}
