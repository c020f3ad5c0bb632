package stats

import "fmt"

// KVOffload is what a KV offloading tier (host memory or disk beneath the
// accelerator's KV cache, vLLM's OffloadingConnector) did in one step.
type KVOffload struct {
	// Loads are the transfers completed this step from the offload medium
	// to the accelerator; Stores those from the accelerator to the medium.
	Loads  []KVOffloadTransfer
	Stores []KVOffloadTransfer
	// LookupSyncDelay holds, in seconds, the time of each lookup call made
	// this step; LookupAsyncDelay the time from a request's lookup first
	// deferring to the lookup that resolved it (or to the request's finish).
	LookupSyncDelay  []float64
	LookupAsyncDelay []float64
	// AllocationFailures counts stores that could not get space on the medium.
	AllocationFailures int64
	// CPU is the state of a host-memory tier (vLLM's CPU offloading spec);
	// nil for other media.
	CPU *KVOffloadCPU
}

// KVOffloadTransfer is one load or store of KV blocks.
type KVOffloadTransfer struct {
	Bytes   int64
	Seconds float64
}

// KVOffloadCPU is the state of a host-memory offload tier at one step.
type KVOffloadCPU struct {
	// CacheUsage is the fraction (0 to 1) of the CPU KV cache pinned by
	// transfers in flight; WriteUsage the part pinned by stores,
	// ReadUsage the part pinned by loads.
	CacheUsage float64
	WriteUsage float64
	ReadUsage  float64
	// AllocationChunks holds the CPU chunks requested by each store
	// allocation made this step.
	AllocationChunks []int64
	// StoresSkipped counts the blocks not stored this step because they
	// had been offered fewer times than the tier's store threshold (vLLM's
	// store_threshold of 2 or more).
	StoresSkipped int64
}

// Validate reports negative byte counts, NaN, infinite or negative
// durations, and a negative allocation failure count.
func (k *KVOffload) Validate() error {
	for _, l := range [...]struct {
		field     string
		transfers []KVOffloadTransfer
	}{{"Loads", k.Loads}, {"Stores", k.Stores}} {
		for i, t := range l.transfers {
			if err := t.Validate(); err != nil {
				return prefixed(fmt.Sprintf("%s[%d]", l.field, i), err)
			}
		}
	}
	if err := checkSecondsList("LookupSyncDelay", k.LookupSyncDelay); err != nil {
		return err
	}
	if err := checkSecondsList("LookupAsyncDelay", k.LookupAsyncDelay); err != nil {
		return err
	}
	if err := checkCount("AllocationFailures", k.AllocationFailures); err != nil {
		return err
	}
	if k.CPU != nil {
		if err := k.CPU.Validate(); err != nil {
			return prefixed("CPU", err)
		}
	}
	return nil
}

// Validate reports a negative byte count and a NaN, infinite or negative duration.
func (t KVOffloadTransfer) Validate() error {
	if err := checkCount("Bytes", t.Bytes); err != nil {
		return err
	}
	return checkSeconds("Seconds", t.Seconds)
}

// Validate reports usages that are not fractions from 0 to 1 and negative
// chunk or block counts.
func (c *KVOffloadCPU) Validate() error {
	for _, u := range [...]struct {
		field string
		v     float64
	}{{"CacheUsage", c.CacheUsage}, {"WriteUsage", c.WriteUsage}, {"ReadUsage", c.ReadUsage}} {
		if err := checkSeconds(u.field, u.v); err != nil {
			return err
		}
		if u.v > 1 {
			return hintedErr(u.field, u.v, ErrOutOfRange, "want 0 to 1")
		}
	}
	if err := checkCounts("AllocationChunks", c.AllocationChunks); err != nil {
		return err
	}
	return checkCount("StoresSkipped", c.StoresSkipped)
}
