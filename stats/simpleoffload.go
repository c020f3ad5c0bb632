package stats

// SaveOutcome is what vLLM's SimpleCPUOffloadConnector decided for one
// store: the outcome label of vllm:simple_kv_offload_save_outcomes_total.
type SaveOutcome uint8

// The outcomes, as OUTCOME_TO_FIELD of vLLM's
// vllm/v1/simple_kv_offload/metrics.py names them.
const (
	// SaveStored: the blocks were stored to the offload pool.
	SaveStored SaveOutcome = iota
	// SaveDroppedCPUFull: the pool had no room.
	SaveDroppedCPUFull
	// SaveDroppedRequestGone: the request finished or was aborted first.
	SaveDroppedRequestGone
	// SaveDroppedNullBlock: the blocks were null (nothing to store).
	SaveDroppedNullBlock
	// SaveDroppedNotHashed: the blocks had no hash to key them by.
	SaveDroppedNotHashed
	// SaveSkippedAlreadyCached: the pool holds them already.
	SaveSkippedAlreadyCached
	// SaveSkippedInFlight: a store of them is under way.
	SaveSkippedInFlight

	numSaveOutcomes = iota
)

var saveOutcomeLabels = [numSaveOutcomes]string{"stored", "dropped_cpu_full", "dropped_request_gone",
	"dropped_null_block", "dropped_not_hashed", "skipped_already_cached", "skipped_in_flight"}

var saveOutcomeFields = [numSaveOutcomes]string{"Stored", "DroppedCPUFull", "DroppedRequestGone",
	"DroppedNullBlock", "DroppedNotHashed", "SkippedAlreadyCached", "SkippedInFlight"}

// SaveOutcomes returns every SaveOutcome in label order.
func SaveOutcomes() []SaveOutcome {
	out := make([]SaveOutcome, numSaveOutcomes)
	for i := range out {
		out[i] = SaveOutcome(i)
	}
	return out
}

// String returns the outcome label value, "stored" for SaveStored.
func (o SaveOutcome) String() string {
	if int(o) < numSaveOutcomes {
		return saveOutcomeLabels[o]
	}
	return "unknown"
}

// SimpleKVOffload is what vLLM's SimpleCPUOffloadConnector (KV blocks
// offloaded to a CPU or disk pool) did in one step: its store decisions and
// loaded blocks, and its pool at the step's end.
type SimpleKVOffload struct {
	// The store decisions of the step, by outcome (see SaveOutcome).
	Stored, DroppedCPUFull, DroppedRequestGone, DroppedNullBlock, DroppedNotHashed,
	SkippedAlreadyCached, SkippedInFlight int64
	// LoadBlocksIssued are the blocks of the loads dispatched to the
	// workers this step; LoadBlocksCompleted those of the loads that
	// finished successfully this step.
	LoadBlocksIssued, LoadBlocksCompleted int64
	// UsedBlocks are the pool's blocks pinned by transfers in flight or
	// cache hits (capacity minus free; evictable cached blocks are not
	// counted); PendingStoreBlocks those of stores queued, issued or
	// awaiting release.
	UsedBlocks, PendingStoreBlocks int64
}

// ByOutcome returns the store decisions of one outcome, 0 for an unknown one.
func (s *SimpleKVOffload) ByOutcome(o SaveOutcome) int64 {
	switch o {
	case SaveStored:
		return s.Stored
	case SaveDroppedCPUFull:
		return s.DroppedCPUFull
	case SaveDroppedRequestGone:
		return s.DroppedRequestGone
	case SaveDroppedNullBlock:
		return s.DroppedNullBlock
	case SaveDroppedNotHashed:
		return s.DroppedNotHashed
	case SaveSkippedAlreadyCached:
		return s.SkippedAlreadyCached
	case SaveSkippedInFlight:
		return s.SkippedInFlight
	}
	return 0
}

// Validate reports a negative count.
func (s *SimpleKVOffload) Validate() error {
	for _, o := range SaveOutcomes() {
		if err := checkCount(saveOutcomeFields[o], s.ByOutcome(o)); err != nil {
			return err
		}
	}
	for _, c := range [...]struct {
		field string
		v     int64
	}{{"LoadBlocksIssued", s.LoadBlocksIssued}, {"LoadBlocksCompleted", s.LoadBlocksCompleted},
		{"UsedBlocks", s.UsedBlocks}, {"PendingStoreBlocks", s.PendingStoreBlocks}} {
		if err := checkCount(c.field, c.v); err != nil {
			return err
		}
	}
	return nil
}

// SimpleKVOffloadConfig is the deployment of a SimpleCPUOffloadConnector,
// the labels of vllm:simple_kv_offload_info.
type SimpleKVOffloadConfig struct {
	// Backend is "cpu" or "disk".
	Backend string
	// PageCache and LazyOffload are the connector's page_cache and
	// lazy_offload settings.
	PageCache, LazyOffload bool
	// CapacityBlocks is the offload pool's size in blocks.
	CapacityBlocks int64
}

// Validate reports a backend that is neither "cpu" nor "disk" and a
// negative capacity.
func (c SimpleKVOffloadConfig) Validate() error {
	if c.Backend != "cpu" && c.Backend != "disk" {
		return hintedErr("Backend", c.Backend, ErrInvalidLabel, `want "cpu" or "disk"`)
	}
	return checkCount("CapacityBlocks", c.CapacityBlocks)
}
