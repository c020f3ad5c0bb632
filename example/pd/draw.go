package main

// draw returns a number in [0, 1) fixed by a request id and a salt (one salt
// per property): per-request choices that leave the workload's and the
// engines' random sequences as they are, and that the prefill and decode
// instances agree on, as requestPriority does.
func draw(id int, salt uint64) float64 {
	x := uint64(id)*0x9e3779b97f4a7c15 ^ salt
	// splitmix64's finalizer: every input bit affects every output bit.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
