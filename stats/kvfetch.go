package stats

// FetchStage is where a waiting request of a KV consumer (the decode node of
// a P/D deployment) is in loading its KV through the connector: the stage
// label of vllm:num_requests_kv_fetch_by_stage: FetchWaitingToStart,
// FetchInProgress or FetchCompletedWaiting.
type FetchStage uint8

const (
	// FetchWaitingToStart: the load has not started.
	FetchWaitingToStart FetchStage = iota
	// FetchInProgress: the KV is being received.
	FetchInProgress
	// FetchCompletedWaiting: the KV has arrived; the request waits to be
	// scheduled.
	FetchCompletedWaiting

	numFetchStages = iota
)

var fetchStageLabels = [numFetchStages]string{"waiting_to_start", "in_progress", "completed_waiting"}

// FetchStages returns every FetchStage in label order.
func FetchStages() []FetchStage {
	return []FetchStage{FetchWaitingToStart, FetchInProgress, FetchCompletedWaiting}
}

// String returns the stage label value: "waiting_to_start", "in_progress"
// or "completed_waiting".
func (s FetchStage) String() string {
	if int(s) < numFetchStages {
		return fetchStageLabels[s]
	}
	return "unknown"
}

// KVFetch counts, at one step, the waiting requests of a KV consumer by the
// stage of their KV load.
type KVFetch struct {
	WaitingToStart   int64
	InProgress       int64
	CompletedWaiting int64
}

// ByStage returns the count of one stage, 0 for an unknown stage.
func (k *KVFetch) ByStage(s FetchStage) int64 {
	switch s {
	case FetchWaitingToStart:
		return k.WaitingToStart
	case FetchInProgress:
		return k.InProgress
	case FetchCompletedWaiting:
		return k.CompletedWaiting
	}
	return 0
}

// Validate reports a negative count. The counts are not checked against the
// waiting ones: vLLM's code as read for infermetrics does not establish how
// the stages relate to vllm:num_requests_waiting, so nothing more is refused.
func (k *KVFetch) Validate() error {
	for _, s := range FetchStages() {
		if err := checkCount(fetchStageFields[s], k.ByStage(s)); err != nil {
			return err
		}
	}
	return nil
}

var fetchStageFields = [numFetchStages]string{"WaitingToStart", "InProgress", "CompletedWaiting"}
