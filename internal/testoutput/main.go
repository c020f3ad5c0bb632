// Command testoutput reads the output of go test -json and prints what go
// test prints without it (each package's ok or FAIL line, and the output
// of a failed test), and fails when a test printed a stray line: one that
// is neither go test's own (=== RUN, --- PASS, ok...) nor t.Log's (indented,
// after file:line). A passing test writes through t.Log, and routes what a
// server or OpenTelemetry logs there too (http.Server.ErrorLog, the
// standard logger: internal/testlog); a stray line is one on stderr or stdout, which a
// reader of a green run takes for an error. scripts/test.sh pipes its unit
// tests through it:
//
//	go test -json ./... | go run ./internal/testoutput
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/infermetrics/infermetrics/internal/testlog"
)

func main() {
	if stray, err := filter(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testoutput:", err)
		os.Exit(2)
	} else if stray > 0 {
		fmt.Fprintf(os.Stderr, "testoutput: %d stray lines printed by tests (above): a test prints through t.Log\n", stray)
		os.Exit(1)
	}
}

// event is a line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // of a build's output
}

// framing are the starts of the lines go test and package testing print
// themselves, beside a test's t.Log lines (indented).
var framing = []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP",
	"PASS", "FAIL", "ok  \t", "?   \t", "coverage:", "testing: warning: no tests to run"}

// stray reports a line of output that neither go test nor t.Log printed.
func stray(line string) bool {
	if strings.TrimSpace(line) == "" || strings.HasPrefix(line, " ") {
		return false
	}
	for _, f := range framing {
		if strings.HasPrefix(line, f) {
			return false
		}
	}
	return true
}

// filter copies to w what go test without -json prints of the events of
// r, and each stray line of a test, and returns how many lines were
// stray. A line of r that is not an event (go's own messages) is copied.
func filter(r io.Reader, w io.Writer) (int, error) {
	held := map[string][]string{} // package and test: its output so far
	// test2json cuts a long line into several output events: the events
	// after the first continue its line and are not lines of their own.
	midLine := map[string]bool{}
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "output":
			continued := midLine[key]
			midLine[key] = !strings.HasSuffix(e.Output, "\n")
			if continued {
				if e.Test != "" {
					held[key] = append(held[key], e.Output)
				} else {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			if e.Test != "" && stray(e.Output) {
				n++
				fmt.Fprintf(w, "stray output of %s %s: %s", e.Package, e.Test, e.Output)
			}
			if e.Test == "" { // the package's own lines: ok, FAIL, a panic
				if stray(e.Output) {
					n++
					fmt.Fprintf(w, "stray output of %s: %s", e.Package, e.Output)
				} else if !strings.HasPrefix(e.Output, "PASS") && !strings.HasPrefix(e.Output, "=== ") {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			held[key] = append(held[key], e.Output)
		case "fail":
			if e.Test != "" {
				out := strings.Join(held[key], "")
				fmt.Fprint(w, out)
				if own := ownLastLines(out, ownLines); own != nil {
					fmt.Fprintf(w, "--- FAIL: %s: its own last lines, before the output of its processes above:\n%s", e.Test, strings.Join(own, ""))
				}
			}
			delete(held, key)
		case "pass", "skip":
			delete(held, key)
		}
	}
	return n, sc.Err()
}

// ownLines is how many of a failed test's own last lines are repeated
// after its processes' output, and maxOwnLine how long each may be.
const (
	ownLines   = 8
	maxOwnLine = 400
)

// ownLastLines returns the last n lines of a failed test's output that are
// not the output of a process it ran (a t.Log message starting with
// testlog.TailMark, with its continuation lines), each cut at maxOwnLine
// bytes, when there is such output; else nil: the reason is last already.
func ownLastLines(out string, n int) []string {
	var own []string
	inTail, tails := false, false
	for line := range strings.Lines(out) {
		switch {
		case strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "        ") && strings.Contains(line, ": "+testlog.TailMark):
			inTail, tails = true, true
		case inTail && strings.HasPrefix(line, "        "):
		case strings.HasPrefix(line, "    "):
			inTail = false
			if len(line) > maxOwnLine {
				line = line[:maxOwnLine] + "...\n"
			}
			own = append(own, line)
		default:
			inTail = false
		}
	}
	if !tails {
		return nil
	}
	return own[max(0, len(own)-n):]
}
