package stats

// Tier is the physical tier the KV of a cached prompt token came from: the
// second axis of prompt accounting, beside Source (the logical source of
// every prompt token). It is the source label of
// vllm:prompt_tokens_cached_by_source (vLLM PR #56318, enum CacheHitSource
// in vllm/v1/metrics/cache_hit_source.py @8548f56c).
//
// Local prefix cache hits are always TierDevice. A host or disk hit comes
// through vLLM's offloading KV connector, so in vllm:prompt_tokens_by_source
// it is external_kv_transfer, like KV received from another instance (p2p).
// The tiers: TierDevice, TierHost, TierP2P, TierDisk, TierExternalUnspecified.
type Tier uint8

const (
	// TierDevice: this instance's accelerator memory, the local prefix cache
	// (Source LocalCacheHit).
	TierDevice Tier = iota
	// TierHost: a host (CPU) memory offloading tier, through the KV connector.
	TierHost
	// TierP2P: another instance, peer to peer through the KV connector (NIXL,
	// Mooncake transfer), as on the decode node of a P/D deployment.
	TierP2P
	// TierDisk: a disk offloading tier, through the KV connector.
	TierDisk
	// TierExternalUnspecified: through the KV connector from a tier the
	// engine did not name, or from more than one.
	TierExternalUnspecified

	numTiers = iota
)

// tierLabels holds the exported label values, indexed by Tier.
var tierLabels = [numTiers]string{"device", "host", "p2p", "disk", "external_unspecified"}

// Tiers returns every Tier in label order.
func Tiers() []Tier {
	return []Tier{TierDevice, TierHost, TierP2P, TierDisk, TierExternalUnspecified}
}

// String returns the label value of the tier: "device", "host", "p2p",
// "disk" or "external_unspecified".
func (t Tier) String() string {
	if int(t) < numTiers {
		return tierLabels[t]
	}
	return "unknown"
}

// Validate reports ErrUnknownTier for a value that is not one of Tiers().
func (t Tier) Validate() error {
	if int(t) >= numTiers {
		return fieldErr("Tier", uint8(t), ErrUnknownTier)
	}
	return nil
}

// ExternalTiers splits the prompt tokens received through the KV connector
// (PromptTokens.ExternalKVTransfer) by the tier they came from. Tokens it
// does not attribute count as external_unspecified, so the zero value is
// right for an engine that does not know its tiers.
type ExternalTiers struct {
	Host int64
	P2P  int64
	Disk int64
}

// attributed returns Host + P2P + Disk, or the first negative count or an
// overflow.
func (x ExternalTiers) attributed() (int64, error) {
	if err := checkCount("Host", x.Host); err != nil {
		return 0, err
	}
	if err := checkCount("P2P", x.P2P); err != nil {
		return 0, err
	}
	if err := checkCount("Disk", x.Disk); err != nil {
		return 0, err
	}
	sum, err := addChecked("P2P", x.Host, x.P2P)
	if err != nil {
		return 0, err
	}
	return addChecked("Disk", sum, x.Disk)
}

// within reports a bad count, or tiers that attribute more tokens than the
// external ones they split (ErrTiersExceedExternal).
func (x ExternalTiers) within(external int64) error {
	sum, err := x.attributed()
	if err != nil {
		return err
	}
	if sum > external {
		return fieldErr("Host+P2P+Disk", sum, ErrTiersExceedExternal)
	}
	return nil
}

// ByTier returns the cached prompt tokens that came from one tier, 0 for an
// unknown tier: device is the local cache hits, and external_unspecified the
// external tokens not attributed to host, p2p or disk. Over Tiers() they sum
// to Cached() for a valid PromptTokens.
func (p PromptTokens) ByTier(t Tier) int64 {
	x := p.ExternalTiers
	switch t {
	case TierDevice:
		return p.LocalCacheHit
	case TierHost:
		return x.Host
	case TierP2P:
		return x.P2P
	case TierDisk:
		return x.Disk
	case TierExternalUnspecified:
		return p.ExternalKVTransfer - x.Host - x.P2P - x.Disk
	}
	return 0
}

// Cached is what the scheduler found for a request when it scheduled it:
// prompt tokens in the local prefix cache (tier device) and received
// through the KV connector, with the tiers of the latter.
type Cached struct {
	Local    int64
	External int64
	// ExternalTiers splits External; the zero value leaves it all
	// external_unspecified.
	ExternalTiers ExternalTiers
}

// SplitCached is SplitPrompt with the external tokens split by tier: the
// tiers must not attribute more than External.
func SplitCached(prompt int64, c Cached) (PromptTokens, error) {
	p, err := SplitPrompt(prompt, c.Local, c.External)
	if err != nil {
		return PromptTokens{}, err
	}
	if err := c.ExternalTiers.within(c.External); err != nil {
		return PromptTokens{}, prefixed("ExternalTiers", err)
	}
	p.ExternalTiers = c.ExternalTiers
	return p, nil
}

// add returns x + y for valid x and y, or ErrOverflow.
func (x ExternalTiers) add(y ExternalTiers) (ExternalTiers, error) {
	var sum ExternalTiers
	var err error
	if sum.Host, err = addChecked("Host", x.Host, y.Host); err != nil {
		return ExternalTiers{}, err
	}
	if sum.P2P, err = addChecked("P2P", x.P2P, y.P2P); err != nil {
		return ExternalTiers{}, err
	}
	if sum.Disk, err = addChecked("Disk", x.Disk, y.Disk); err != nil {
		return ExternalTiers{}, err
	}
	return sum, nil
}
