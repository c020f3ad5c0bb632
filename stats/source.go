package stats

// Source is where the KV of a prompt token came from. Every prompt token has
// exactly one source, so counts by source always sum to the prompt length:
// LocalCompute, LocalCacheHit or ExternalKVTransfer.
type Source uint8

const (
	// LocalCompute: the token was prefilled on this instance (real compute work).
	LocalCompute Source = iota
	// LocalCacheHit: the token's KV came from this instance's prefix cache.
	LocalCacheHit
	// ExternalKVTransfer: the token's KV was received through a KV connector,
	// as on the decode node of a prefill/decode disaggregated deployment.
	ExternalKVTransfer

	numSources = iota
)

// sourceLabels holds the exported label values, indexed by Source.
var sourceLabels = [numSources]string{"local_compute", "local_cache_hit", "external_kv_transfer"}

// Sources returns every Source in label order.
func Sources() []Source { return []Source{LocalCompute, LocalCacheHit, ExternalKVTransfer} }

// String returns the label value of the source: "local_compute",
// "local_cache_hit" or "external_kv_transfer".
func (s Source) String() string {
	if int(s) < numSources {
		return sourceLabels[s]
	}
	return "unknown"
}

// Validate reports ErrUnknownSource for a value that is not one of Sources().
func (s Source) Validate() error {
	if int(s) >= numSources {
		return fieldErr("Source", uint8(s), ErrUnknownSource)
	}
	return nil
}

// PromptTokens counts prompt tokens by the source that satisfied them. Use
// SplitPrompt to derive it for one request and Add to sum requests.
type PromptTokens struct {
	// Computed tokens were prefilled on this instance (source local_compute).
	Computed int64
	// LocalCacheHit tokens came from this instance's prefix cache.
	LocalCacheHit int64
	// ExternalKVTransfer tokens arrived through a KV connector.
	ExternalKVTransfer int64
	// ExternalTiers splits ExternalKVTransfer by the tier the KV came from
	// (see ByTier); the zero value leaves it all external_unspecified.
	ExternalTiers ExternalTiers
}

// SplitPrompt derives the per-source counts of one request's prompt from its
// length and the tokens found in the local prefix cache and through the KV
// connector when it was scheduled. cached = localCached + externalCached must
// not exceed prompt; computed = prompt - cached. The result sums to prompt by
// construction.
func SplitPrompt(prompt, localCached, externalCached int64) (PromptTokens, error) {
	if err := checkCount("prompt", prompt); err != nil {
		return PromptTokens{}, err
	}
	if err := checkCount("localCached", localCached); err != nil {
		return PromptTokens{}, err
	}
	if err := checkCount("externalCached", externalCached); err != nil {
		return PromptTokens{}, err
	}
	cached, err := addChecked("externalCached", localCached, externalCached)
	if err != nil {
		return PromptTokens{}, err
	}
	if cached > prompt {
		return PromptTokens{}, fieldErr("localCached+externalCached", cached, ErrCachedExceedsPrompt)
	}
	return PromptTokens{
		Computed:           prompt - cached,
		LocalCacheHit:      localCached,
		ExternalKVTransfer: externalCached,
	}, nil
}

// RemotePrefillCached returns what a P/D decode instance finds when it first
// schedules a request whose prompt KV a prefill instance computed and sends
// it (vLLM's kv_transfer_params with do_remote_prefill): localCached tokens
// of its own prefix cache, at most prompt-1 as vLLM's prefix cache never
// covers the last token, and the rest of the prompt but its last token
// through the KV connector, from another instance (TierP2P). The last prompt
// token is computed here, so local_compute counts 1.
//
// This is vLLM's rule for the decode instance's work: once the KV has
// arrived, its scheduler sets the request's computed tokens to the prompt
// less one (Scheduler._update_waiting_for_remote_kv,
// vllm/v1/core/sched/scheduler.py @b4622cf9) and recomputes the last token
// for its logits; num_cached_tokens, hence the response's
// usage.prompt_tokens_details.cached_tokens and
// vllm:request_prefill_kv_computed_tokens (1), count it so. vLLM's
// vllm:prompt_tokens_by_source differs by that token: it is set when the
// scheduler asks the NIXL connector for the rest of the prompt (prompt minus
// the local hits, the last token included: get_num_new_matched_tokens,
// nixl/pull_scheduler.py @0050936b), before the transfer, so it counts the
// last token as external_kv_transfer and local_compute 0; for a hybrid
// (Mamba) model the connector asks for prompt-1 and vLLM counts as here.
// One split cannot match both of vLLM's counts; this one keeps every prompt
// token in one source and counts the work done.
//
// localCached above prompt is an error matching ErrCachedExceedsPrompt, a
// negative count one matching ErrNegative. A decode instance that computes
// the prompt itself (no transfer, or one below vLLM's kv_recompute_threshold)
// reports Cached{Local: localCached} instead.
func RemotePrefillCached(prompt, localCached int64) (Cached, error) {
	if err := checkCount("prompt", prompt); err != nil {
		return Cached{}, err
	}
	if err := checkCount("localCached", localCached); err != nil {
		return Cached{}, err
	}
	if localCached > prompt {
		return Cached{}, fieldErr("localCached", localCached, ErrCachedExceedsPrompt)
	}
	if prompt == 0 {
		return Cached{}, nil
	}
	local := min(localCached, prompt-1)
	external := prompt - 1 - local
	return Cached{Local: local, External: external, ExternalTiers: ExternalTiers{P2P: external}}, nil
}

// Total returns the prompt tokens over all sources.
func (p PromptTokens) Total() int64 { return p.Computed + p.LocalCacheHit + p.ExternalKVTransfer }

// Cached returns the tokens not computed here: local cache hits plus
// transferred KV.
func (p PromptTokens) Cached() int64 { return p.LocalCacheHit + p.ExternalKVTransfer }

// BySource returns the count of one source, 0 for an unknown source.
func (p PromptTokens) BySource(s Source) int64 {
	switch s {
	case LocalCompute:
		return p.Computed
	case LocalCacheHit:
		return p.LocalCacheHit
	case ExternalKVTransfer:
		return p.ExternalKVTransfer
	}
	return 0
}

// Add adds q to p. On an invalid q or an overflow it returns the error and
// leaves p unchanged.
func (p *PromptTokens) Add(q PromptTokens) error {
	if err := q.Validate(); err != nil {
		return err
	}
	sum := PromptTokens{}
	var err error
	if sum.Computed, err = addChecked("Computed", p.Computed, q.Computed); err != nil {
		return err
	}
	if sum.LocalCacheHit, err = addChecked("LocalCacheHit", p.LocalCacheHit, q.LocalCacheHit); err != nil {
		return err
	}
	if sum.ExternalKVTransfer, err = addChecked("ExternalKVTransfer", p.ExternalKVTransfer, q.ExternalKVTransfer); err != nil {
		return err
	}
	if sum.ExternalTiers, err = p.ExternalTiers.add(q.ExternalTiers); err != nil {
		return prefixed("ExternalTiers", err)
	}
	if err := sum.Validate(); err != nil {
		return err
	}
	*p = sum
	return nil
}

// Validate reports a negative count (ErrNegative), a total that does not fit
// in an int64 (ErrOverflow), or external tiers that attribute more tokens
// than ExternalKVTransfer (ErrTiersExceedExternal).
func (p PromptTokens) Validate() error {
	if err := checkCount("Computed", p.Computed); err != nil {
		return err
	}
	if err := checkCount("LocalCacheHit", p.LocalCacheHit); err != nil {
		return err
	}
	if err := checkCount("ExternalKVTransfer", p.ExternalKVTransfer); err != nil {
		return err
	}
	cached, err := addChecked("ExternalKVTransfer", p.LocalCacheHit, p.ExternalKVTransfer)
	if err != nil {
		return err
	}
	if _, err = addChecked("Computed", cached, p.Computed); err != nil {
		return err
	}
	if err := p.ExternalTiers.within(p.ExternalKVTransfer); err != nil {
		return prefixed("ExternalTiers", err)
	}
	return nil
}
