package main

// requestPriority is the scheduling priority a client gives request id:
// -2 to 2, spread evenly (lower is more urgent), the same on the prefill
// and decode instances, as a P/D proxy passes it on.
func requestPriority(id int) int {
	x := uint64(id) * 0x9e3779b97f4a7c15 // Fibonacci hashing: consecutive ids spread out
	return int((x>>32)%5) - 2
}
