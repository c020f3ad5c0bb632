// Package testsh holds the tests of scripts/test.sh's own logic, the part
// of the test command that is shell, not Go. It has no code.
package testsh
