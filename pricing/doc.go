// Package pricing prices a request's tokens from a price table in the format
// of LiteLLM's model_prices_and_context_window.json, cache-aware: cached
// prompt tokens at the cache read price, cache writes at the cache write
// price, reasoning, audio and image tokens at their own prices where the
// table has them. It imports stats and the standard library only.
//
// # The table
//
// [Parse] reads one file, [Load] several: a model in a later file replaces
// the whole entry of an earlier one (never field by field), so that an
// operator's file of contract prices and self-hosted models, loaded after
// LiteLLM's list, states every price of the models it names and inherits
// none of the list's. Per model, the fields read are input_cost_per_token,
// output_cost_per_token, cache_read_input_token_cost (else
// input_cost_per_token_cache_hit, as some of DeepSeek's entries name it),
// cache_creation_input_token_cost, output_cost_per_reasoning_token,
// input_cost_per_audio_token, output_cost_per_audio_token,
// input_cost_per_image_token, output_cost_per_image_token, and the tiers
// <field>_above_<N>_tokens or _above_<N>k_tokens of the first four (at
// most 16 tiers a model, or the file is refused). A price
// is a JSON number, or a string holding one (as LiteLLM accepts), or null
// (no price); it must be finite, not negative and at most [MaxPrice] per
// token, or the whole file is refused with an error naming the model and
// the field. An entry with neither input_cost_per_token nor
// output_cost_per_token (images per pixel or per image, searches, LiteLLM's
// "sample_spec") is skipped, not refused; every other field is ignored.
//
// # Matching a model
//
// A request is priced by the first of these names the table has, exactly
// (case and all): the response's model (a dated snapshot such as
// gpt-4o-2024-08-06 is often an entry of its own), the request's model,
// each of them with provider prefixes stripped one at a time
// ("openrouter/openai/gpt-4o", then "openai/gpt-4o", then "gpt-4o"), then
// each of those with a date suffix stripped (-YYYY-MM-DD, -YYYYMMDD or
// @YYYYMMDD, a month 01 to 12 and a day 01 to 31 of a year 20xx). Nothing
// else: no prefix of a name, no case folding, no prefix added (a table's
// "azure/gpt-4o" is found only by that name, but for [Table.ForProvider]),
// so gpt-4o-mini is never priced as gpt-4o, and a name longer than
// stats.MaxResponseModelLen (256 bytes) names no model. A request none of
// whose names the table has is not priced ([Table.Cost] returns false): it is counted
// as unpriced, never priced by a guess.
//
// [Table.ForProvider] gives the table for one provider's traffic: the
// entries LiteLLM's list keeps under the provider's prefix (azure/,
// bedrock/, deepseek/, gemini/, vertex_ai/, groq/, mistral/, moonshot/), each by its
// name without the prefix, are searched first by the same rule, then all
// entries; an override of such a provider's price names its prefixed key.
//
// # The cost
//
// The kinds are stats.TokenUsage's. Each is priced at its own field; a
// kind whose price the entry lacks is priced at the price of the whole it
// is a part of: cache reads and writes and input audio and image at the
// input price, reasoning and output audio and image at the output price
// (an entry without input_cost_per_token or without output_cost_per_token
// prices those at 0, as LiteLLM does). The parts come out of their whole:
// input audio and image out of the input tokens (those neither read from
// nor written to the cache), reasoning, output audio and image out of the
// output tokens, each at most what the others left, so that no token is
// counted twice. Charged is that sum; Uncached is the same with the cache
// reads and writes at the input price (see stats.Cost). A cost above
// stats.MaxCost is returned as stats.MaxCost.
//
// A tier applies when the whole prompt (input, cache reads and cache
// writes) has more tokens than its threshold; of the tiers that do, the
// highest. It switches the input, output, cache read and cache write prices
// to its own where it has them (the others keep their base prices); the
// reasoning, audio and image prices are not tiered, and a kind priced at
// its whole's price follows the whole's tier. A tier exists only where
// input_cost_per_token_above_<N>_tokens does.
//
// This follows the cost code of LiteLLM (BerriAI/litellm @
// 001b531ae960aad3fa38447508d4ce0d05c118c4,
// litellm/litellm_core_utils/llm_cost_calc/utils.py: _get_token_base_cost,
// generic_cost_per_token), except where LiteLLM prices a token at 0 for a
// price the entry lacks: LiteLLM bills cache reads and writes at 0 without
// cache_read_input_token_cost and cache_creation_input_token_cost (at the
// input price in its tiered_pricing path) and input audio at 0 without
// input_cost_per_audio_token, and an input image without its price at the
// untiered input price. Not applied: service tiers (_priority, _flex,
// _batches), the one-hour cache write price (stats has one cache write
// kind), off_peak_pricing, tiered_pricing lists, xAI's inclusive
// thresholds, regional uplifts; every request is priced at the standard
// rates.
//
// Costs are float64 sums of tokens times prices (the tests hold them within
// 1e-12, relatively, of the exact decimal values). A [Table] is read-only
// once made and safe for concurrent use.
package pricing
