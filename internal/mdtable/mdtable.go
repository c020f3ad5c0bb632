// Package mdtable reads a table of a Markdown document, for the tests that
// keep a document's table equal to what the code does.
package mdtable

import (
	"fmt"
	"os"
	"strings"
)

// Rows returns the cells of each row of the table in the Markdown file at
// path whose header row is header ("| a | b |"), each cell trimmed: the rows
// below its separator line up to the first line that is not a row. A row
// with another number of cells than the header is an error.
func Rows(path, header string) ([][]string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	want := len(cells(header))
	_, rest, ok := strings.Cut(string(doc), "\n"+header+"\n")
	if !ok {
		return nil, fmt.Errorf("%s has no table %q", path, header)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the separator line
	var rows [][]string
	for line := range strings.Lines(rest) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		c := cells(line)
		if len(c) != want {
			return nil, fmt.Errorf("%s: the row %q of table %q has %d cells, want %d", path, strings.TrimSpace(line), header, len(c), want)
		}
		rows = append(rows, c)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: table %q has no row", path, header)
	}
	return rows, nil
}

// cells splits a table row into its trimmed cells.
func cells(row string) []string {
	c := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
	for i := range c {
		c[i] = strings.TrimSpace(c[i])
	}
	return c
}
