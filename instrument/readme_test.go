package instrument_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeUseIsExample keeps README.md's "Use" program identical to
// example_use_test.go: its imports, then Example's body (without the Output
// comment) as main's. The file compiles with exactly those imports and Example
// runs under go test, so the README shows a program that compiles and runs.
func TestReadmeUseIsExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, use, ok := strings.Cut(string(readme), "\n## Use\n")
	_, snippet, ok2 := strings.Cut(use, "```go\n")
	snippet, _, ok3 := strings.Cut(snippet, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no Go code block under ## Use")
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
		t.Errorf("README.md's Use block is not example_use_test.go as a program:\n%s\nwant:\n%s", snippet, want)
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
