//go:build !race

package instrument_test

// loraBoundedStates is the distinct states TestLoRAHistoryBounded sets.
const loraBoundedStates = 1_000_000
