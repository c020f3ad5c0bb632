//go:build race

package instrument_test

// loraBoundedStates is the distinct states TestLoRAHistoryBounded sets: under
// the race detector, which makes each one about seven times slower, a tenth
// of the million.
const loraBoundedStates = 100_000
