//go:build race

package instrument_test

// raceEnabled is set under the race detector, which makes long loops of
// calls about ten times slower: tests that make a million calls make fewer.
const raceEnabled = true
