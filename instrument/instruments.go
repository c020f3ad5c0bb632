package instrument

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// instruments holds every instrument of the catalog.
type instruments struct {
	// Counters and gauges are observable: each engine keeps their values in
	// atomics and one callback per Recorder reports them (see observe).
	running, waiting, waitingByReason, sleepState metric.Int64ObservableGauge
	kvCacheUsage                                  metric.Float64ObservableGauge

	prefixQueries, prefixHits, extPrefixQueries, extPrefixHits metric.Int64ObservableCounter
	mmQueries, mmHits                                          metric.Int64ObservableCounter
	preemptions, promptTokens, promptCached, generationTokens  metric.Int64ObservableCounter
	promptRecomputed                                           metric.Int64ObservableCounter // a family of older vLLM versions
	requestSuccess, corrupted                                  metric.Int64ObservableCounter

	requestPrompt, requestGeneration, iterationTokens, maxGeneration metric.Int64Histogram
	paramsN, paramsMaxTokens, prefillKVComputed                      metric.Int64Histogram

	ttft, itl, tpot, e2e, queueTime, inferenceTime, prefillTime, decodeTime metric.Float64Histogram
	kvLifetime, kvIdle, kvReuseGap                                          metric.Float64Histogram

	specDrafts, specDraftTokens, specAccepted, specAcceptedPerPos metric.Int64ObservableCounter

	nixlXferTime, nixlPostTime                           metric.Float64Histogram
	nixlBytes, nixlDescriptors                           metric.Int64Histogram
	nixlFailedTransfers, nixlFailedNotifs, nixlKVExpired metric.Int64ObservableCounter

	// The LoRA info gauge is observable too: only each engine's current
	// state is reported. The cache configuration is recorded once.
	loraInfo        metric.Float64ObservableGauge
	cacheConfigInfo metric.Int64Gauge

	// Priority scheduling and KV offloading (priority.go, offload.go).
	requestPriority                                        metric.Float64Histogram
	schedulerPolicy                                        metric.Int64ObservableGauge
	kvOffloadLoadBytes, kvOffloadStoreBytes                metric.Int64ObservableCounter
	kvOffloadAllocFail                                     metric.Int64ObservableCounter
	kvOffloadLoadTime, kvOffloadStoreTime                  metric.Float64ObservableCounter
	kvOffloadLoadSize, kvOffloadStoreSize                  metric.Int64Histogram
	kvOffloadLookupSync, kvOffloadLookupAsync              metric.Float64Histogram
	kvOffloadCPUUsage, kvOffloadCPUWrite, kvOffloadCPURead metric.Float64ObservableGauge
	kvOffloadCPUAlloc                                      metric.Int64Histogram
	kvOffloadStoresSkipped                                 metric.Int64ObservableCounter
	// The SimpleCPUOffloadConnector (simpleoffload.go) and the API
	// server's operations (serverops.go).
	simpleSaves, simpleLoadBlocks   metric.Int64ObservableCounter
	simpleUsed, simplePending       metric.Int64ObservableGauge
	simpleInfo                      metric.Int64Gauge
	sleepOperation, weightOperation metric.Float64Histogram
	// Families of newer vLLM versions (see docs/metrics.md for the commits).
	requestNumPreemptions         metric.Int64Histogram
	kvFetchByStage                metric.Int64ObservableGauge
	estFlops, estReadB, estWriteB metric.Float64ObservableCounter
	nixlNotifsAfterExpiry         metric.Int64ObservableCounter
	// The GenAI client metrics of Backend (client.go).
	clientTokens                                     metric.Int64Histogram
	clientDuration, clientFirstChunk, clientPerChunk metric.Float64Histogram
	// The GenAI server metrics of WithGenAISemconv (semconv.go).
	serverDuration, serverTTFT, serverTPOT metric.Float64Histogram
	// The P/D router families and the gateway's attempts (router.go).
	pdPrefillLeg, pdDecodeFirstChunk, pdHandoff metric.Float64Histogram
	gatewayAttempts                             metric.Int64Histogram
	// The Recorder's own counter of refused input (refusal.go).
	invalidEvents metric.Int64ObservableCounter
	// The front end's refused admissions (admission.go).
	admissionRejections metric.Int64ObservableCounter
	// The HTTP server families (httpserver.go).
	httpRequests                   metric.Int64Counter
	httpDuration, httpDurationHigh metric.Float64Histogram
	// The usage families (usage.go).
	usage usageInstruments

	observed []metric.Observable // every observable instrument above
	meter    metric.Meter        // kept reachable: its address identifies claims (see scopeMeter)
}

// builder creates instruments from their descriptors and collects errors.
type builder struct {
	meter       metric.Meter
	maxModelLen int
	errs        []error
	observed    []metric.Observable // the instruments the callback reports
}

func (b *builder) describe(name string) (Descriptor, bool) {
	d, ok := lookup(name)
	if !ok {
		b.errs = append(b.errs, fmt.Errorf("instrument: no descriptor for %q", name))
	}
	return d, ok
}

func (b *builder) bounds(d Descriptor) []float64 {
	if d.LengthBuckets {
		return LengthBuckets(b.maxModelLen)
	}
	return d.Buckets
}

func (b *builder) note(err error) {
	if err != nil {
		b.errs = append(b.errs, err)
	}
}

func (b *builder) int64ObservableCounter(name string) metric.Int64ObservableCounter {
	d, _ := b.describe(name)
	c, err := b.meter.Int64ObservableCounter(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	b.observed = append(b.observed, c)
	return c
}

func (b *builder) float64ObservableCounter(name string) metric.Float64ObservableCounter {
	d, _ := b.describe(name)
	c, err := b.meter.Float64ObservableCounter(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	b.observed = append(b.observed, c)
	return c
}

func (b *builder) int64ObservableGauge(name string) metric.Int64ObservableGauge {
	d, _ := b.describe(name)
	g, err := b.meter.Int64ObservableGauge(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	b.observed = append(b.observed, g)
	return g
}

func (b *builder) float64ObservableGauge(name string) metric.Float64ObservableGauge {
	d, _ := b.describe(name)
	g, err := b.meter.Float64ObservableGauge(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	b.observed = append(b.observed, g)
	return g
}

func (b *builder) int64Counter(name string) metric.Int64Counter {
	d, _ := b.describe(name)
	c, err := b.meter.Int64Counter(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	return c
}

func (b *builder) float64Counter(name string) metric.Float64Counter {
	d, _ := b.describe(name)
	c, err := b.meter.Float64Counter(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	return c
}

func (b *builder) int64Gauge(name string) metric.Int64Gauge {
	d, _ := b.describe(name)
	g, err := b.meter.Int64Gauge(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
	b.note(err)
	return g
}

func (b *builder) int64Histogram(name string) metric.Int64Histogram {
	d, _ := b.describe(name)
	h, err := b.meter.Int64Histogram(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description),
		metric.WithExplicitBucketBoundaries(b.bounds(d)...))
	b.note(err)
	return h
}

func (b *builder) float64Histogram(name string) metric.Float64Histogram {
	d, _ := b.describe(name)
	h, err := b.meter.Float64Histogram(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description),
		metric.WithExplicitBucketBoundaries(b.bounds(d)...))
	b.note(err)
	return h
}

func newInstruments(meter metric.Meter, maxModelLen int) (*instruments, error) {
	b := &builder{meter: meter, maxModelLen: maxModelLen}
	i := &instruments{
		running:             b.int64ObservableGauge(NameNumRequestsRunning),
		waiting:             b.int64ObservableGauge(NameNumRequestsWaiting),
		waitingByReason:     b.int64ObservableGauge(NameNumRequestsWaitingByReason),
		sleepState:          b.int64ObservableGauge(NameEngineSleepState),
		kvCacheUsage:        b.float64ObservableGauge(NameKVCacheUsage),
		prefixQueries:       b.int64ObservableCounter(NamePrefixCacheQueries),
		prefixHits:          b.int64ObservableCounter(NamePrefixCacheHits),
		extPrefixQueries:    b.int64ObservableCounter(NameExternalPrefixCacheQueries),
		extPrefixHits:       b.int64ObservableCounter(NameExternalPrefixCacheHits),
		mmQueries:           b.int64ObservableCounter(NameMMCacheQueries),
		mmHits:              b.int64ObservableCounter(NameMMCacheHits),
		preemptions:         b.int64ObservableCounter(NameNumPreemptions),
		promptTokens:        b.int64ObservableCounter(NamePromptTokens),
		promptCached:        b.int64ObservableCounter(NamePromptTokensCached),
		promptRecomputed:    b.int64ObservableCounter(NamePromptTokensRecomputed),
		generationTokens:    b.int64ObservableCounter(NameGenerationTokens),
		requestSuccess:      b.int64ObservableCounter(NameRequestSuccess),
		corrupted:           b.int64ObservableCounter(NameCorruptedRequests),
		invalidEvents:       b.int64ObservableCounter(NameInvalidEvents),
		admissionRejections: b.int64ObservableCounter(NameAdmissionRejections),

		requestPrompt:     b.int64Histogram(NameRequestPromptTokens),
		requestGeneration: b.int64Histogram(NameRequestGenerationTokens),
		iterationTokens:   b.int64Histogram(NameIterationTokens),
		maxGeneration:     b.int64Histogram(NameRequestMaxNumGenerationTokens),
		paramsN:           b.int64Histogram(NameRequestParamsN),
		paramsMaxTokens:   b.int64Histogram(NameRequestParamsMaxTokens),
		prefillKVComputed: b.int64Histogram(NameRequestPrefillKVComputedTokens),

		ttft:          b.float64Histogram(NameTimeToFirstToken),
		itl:           b.float64Histogram(NameInterTokenLatency),
		tpot:          b.float64Histogram(NameRequestTimePerOutputToken),
		e2e:           b.float64Histogram(NameE2ERequestLatency),
		queueTime:     b.float64Histogram(NameRequestQueueTime),
		inferenceTime: b.float64Histogram(NameRequestInferenceTime),
		prefillTime:   b.float64Histogram(NameRequestPrefillTime),
		decodeTime:    b.float64Histogram(NameRequestDecodeTime),
		kvLifetime:    b.float64Histogram(NameKVBlockLifetime),
		kvIdle:        b.float64Histogram(NameKVBlockIdleBeforeEvict),
		kvReuseGap:    b.float64Histogram(NameKVBlockReuseGap),

		specDrafts:         b.int64ObservableCounter(NameSpecDecodeNumDrafts),
		specDraftTokens:    b.int64ObservableCounter(NameSpecDecodeNumDraftTokens),
		specAccepted:       b.int64ObservableCounter(NameSpecDecodeNumAcceptedTokens),
		specAcceptedPerPos: b.int64ObservableCounter(NameSpecDecodeNumAcceptedTokensPerPos),

		nixlXferTime:        b.float64Histogram(NameNIXLXferTime),
		nixlPostTime:        b.float64Histogram(NameNIXLPostTime),
		nixlBytes:           b.int64Histogram(NameNIXLBytesTransferred),
		nixlDescriptors:     b.int64Histogram(NameNIXLNumDescriptors),
		nixlFailedTransfers: b.int64ObservableCounter(NameNIXLNumFailedTransfers),
		nixlFailedNotifs:    b.int64ObservableCounter(NameNIXLNumFailedNotifs),
		nixlKVExpired:       b.int64ObservableCounter(NameNIXLNumKVExpiredReqs),

		loraInfo:        b.float64ObservableGauge(NameLoRARequestsInfo),
		cacheConfigInfo: b.int64Gauge(NameCacheConfigInfo),

		requestPriority:        b.float64Histogram(NameRequestPriority),
		schedulerPolicy:        b.int64ObservableGauge(NameSchedulerPolicyInfo),
		kvOffloadLoadBytes:     b.int64ObservableCounter(NameKVOffloadLoadBytes),
		kvOffloadStoreBytes:    b.int64ObservableCounter(NameKVOffloadStoreBytes),
		kvOffloadAllocFail:     b.int64ObservableCounter(NameKVOffloadAllocFail),
		kvOffloadLoadTime:      b.float64ObservableCounter(NameKVOffloadLoadTime),
		kvOffloadStoreTime:     b.float64ObservableCounter(NameKVOffloadStoreTime),
		kvOffloadLoadSize:      b.int64Histogram(NameKVOffloadLoadSize),
		kvOffloadStoreSize:     b.int64Histogram(NameKVOffloadStoreSize),
		kvOffloadLookupSync:    b.float64Histogram(NameKVOffloadLookupSync),
		kvOffloadLookupAsync:   b.float64Histogram(NameKVOffloadLookupAsync),
		kvOffloadCPUUsage:      b.float64ObservableGauge(NameKVOffloadCPUUsage),
		kvOffloadCPUWrite:      b.float64ObservableGauge(NameKVOffloadCPUWrite),
		kvOffloadCPURead:       b.float64ObservableGauge(NameKVOffloadCPURead),
		kvOffloadCPUAlloc:      b.int64Histogram(NameKVOffloadCPUAlloc),
		kvOffloadStoresSkipped: b.int64ObservableCounter(NameKVOffloadStoresSkipped),
		simpleSaves:            b.int64ObservableCounter(NameSimpleKVOffloadSaveOutcomes),
		simpleLoadBlocks:       b.int64ObservableCounter(NameSimpleKVOffloadLoadBlocks),
		simpleUsed:             b.int64ObservableGauge(NameSimpleKVOffloadUsedBlocks),
		simplePending:          b.int64ObservableGauge(NameSimpleKVOffloadPendingStore),
		simpleInfo:             b.int64Gauge(NameSimpleKVOffloadInfo),
		sleepOperation:         b.float64Histogram(NameSleepModeOperationDuration),
		weightOperation:        b.float64Histogram(NameRLWeightUpdateOperationDuration),
		requestNumPreemptions:  b.int64Histogram(NameRequestNumPreemptions),
		kvFetchByStage:         b.int64ObservableGauge(NameNumRequestsKVFetchByStage),
		estFlops:               b.float64ObservableCounter(NameEstimatedFlopsPerGPU),
		estReadB:               b.float64ObservableCounter(NameEstimatedReadBytesPerGPU),
		estWriteB:              b.float64ObservableCounter(NameEstimatedWriteBytesPerGPU),
		nixlNotifsAfterExpiry:  b.int64ObservableCounter(NameNIXLNumNotifsAfterExp),
		clientTokens:           b.int64Histogram(NameGenAIClientTokenUsage),
		clientDuration:         b.float64Histogram(NameGenAIClientOperationDuration),
		clientFirstChunk:       b.float64Histogram(NameGenAIClientTimeToFirstChunk),
		clientPerChunk:         b.float64Histogram(NameGenAIClientTimePerOutputChunk),
		serverDuration:         b.float64Histogram(NameGenAIServerRequestDuration),
		serverTTFT:             b.float64Histogram(NameGenAIServerTimeToFirstToken),
		serverTPOT:             b.float64Histogram(NameGenAIServerTimePerOutputToken),
		pdPrefillLeg:           b.float64Histogram(NamePDPrefillLegDuration),
		pdDecodeFirstChunk:     b.float64Histogram(NamePDDecodeLegTimeToFirstChunk),
		pdHandoff:              b.float64Histogram(NamePDHandoffDuration),
		gatewayAttempts:        b.int64Histogram(NameGatewayRequestAttempts),
		httpRequests:           b.int64Counter(NameHTTPRequests),
		httpDuration:           b.float64Histogram(NameHTTPRequestDuration),
		httpDurationHigh:       b.float64Histogram(NameHTTPRequestDurationHigh),
		usage:                  b.usageInstruments(),
	}
	if err := errors.Join(b.errs...); err != nil {
		return nil, fmt.Errorf("instrument: creating instruments: %w", err)
	}
	i.observed, i.meter = b.observed, meter
	return i, nil
}
