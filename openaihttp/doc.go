// Package openaihttp records OpenAI-compatible HTTP traffic, for Go programs
// that see requests but no engine step: servers wrapping an engine,
// gateways, and prefill/decode (P/D) routers in front of vLLM, SGLang,
// Ollama or llama.cpp servers. It has the shape of otelhttp: NewHandler
// wraps a server's http.Handler, NewTransport a client's
// http.RoundTripper. Like package instrument, it imports the OpenTelemetry
// API only; its measurements go through the same instruments, views and
// exporters as an engine's.
//
// # What the handler records
//
// On the instrument.Engine of WithEngine (or WithEngineFor, by model), for
// each POST to an endpoint below, through Engine.RecordRequest:
// vllm:request_success_total by finish reason, the e2e latency, the
// request's max_tokens and n, and, for a streamed response, the time to its
// first content chunk as TTFT and the time between content chunks as
// vllm:inter_token_latency_seconds. With n > 1 choices the time is each
// choice's own, as vLLM records it: from that choice's previous content
// chunk (a chunk carrying several choices gives a value for each, a
// choice's first chunk none); choices past the 16th are not timed one by
// one and give none, rather than gaps to other choices' chunks. A chunk
// carrying several tokens is one value, so with multi-token chunks these
// are inter-chunk latencies, fewer and larger than per-token ones. Chunks that arrive in one write (one
// Write of the handler, one Read of the transport's caller) are timed
// alike, once per write: the gaps between them are 0. When the response reports usage it also
// records the prompt tokens by source, the cached tokens, the generation
// tokens, the request token histograms and the time per output token;
// without usage none of them (streaming chat and completion clients get
// usage with stream_options.include_usage, which WithIncludeUsage adds to
// requests; the other APIs' streams carry it unasked). Without a cached
// count the cached tokens are unknown and the prompt counts as computed;
// so does a response whose cached tokens exceed its prompt (xAI's grok
// through Azure AI Foundry reports prompt_tokens without the cached part):
// its prompt and generation tokens count, and the Recorder counts the
// dropped cached count in infermetrics.invalid_events (kind value_dropped)
// and reports it (stats.ObservedRequest.Bounded), once per response: a
// handler passing on a leg's response (a gateway, a P/D router's decode
// leg) and that leg, which see the same usage in one Trace, count it once,
// whichever records first. Anthropic's usage cannot have such a
// split (its prompt is input_tokens plus the cache reads and writes), nor
// Ollama's (no cached count). A count that is not a non-negative JSON
// integer (a string, a float, an object) makes its usage unknown.
//
// The usage's other kinds of tokens (stats.ObservedRequest.Details, for
// the usage families and prices) are passed on as each API reports them:
// cache reads whenever a cached count was reported (OpenAI's
// prompt_tokens_details.cached_tokens and the Responses API's
// input_tokens_details.cached_tokens, both a part of the prompt, and
// without them Mistral's usage.num_cached_tokens, which its non-streamed
// chat responses report instead, a part of the prompt too;
// Anthropic's cache_read_input_tokens; llama.cpp's timings.cache_n without
// any), cache writes (Anthropic's cache_creation_input_tokens, and the
// cache_write_tokens of prompt_tokens_details or input_tokens_details that
// OpenRouter, Bedrock and the Responses API report), reasoning
// (completion_tokens_details.reasoning_tokens,
// output_tokens_details.reasoning_tokens, Anthropic's
// output_tokens_details.thinking_tokens), and the audio_tokens and
// image_tokens of the prompt's and of the completion's details. A kind
// the usage does not report, or reports null, is not set: never a guess.
// Ollama reports none. A detail above the tokens it is a part of
// (OpenRouter has sent 11 reasoning tokens of 10 completion tokens) is
// dropped by the Recorder and counted once per response, as cached tokens
// above the prompt are. The model the response names (its "model", the
// Responses API's response.model, Anthropic's message.model; the first
// one a stream names, and none when it is not UTF-8 or longer than 256
// bytes) is stats.ObservedRequest.ResponseModel (gen_ai.response.model).
// Requests
// in flight are vllm:num_requests_running. With instrument.WithGenAISemconv the Recorder
// also records the GenAI server histograms (views.Semconv) by the
// conventions' rules: the time per output token of successful requests with
// usage and more than one output token only. Every other path and method
// passes through untouched (GET /v1/models, /tokenize, /api/tags, ...),
// recorded only in the HTTP families of WithHTTPMetrics (see below).
//
// # Paths
//
// An API is recognised wherever a base URL puts it, by the final segments
// of the request's path (RecordedPaths; doubled and trailing slashes
// aside): /chat/completions is chat, any other /completions text
// completion, /responses the Responses API, /v1/messages Anthropic's (its
// /v1 kept: /messages alone ends OpenAI's threads' paths), Ollama's
// /api/embed and /api/embeddings, /embeddings (any other), /pooling,
// /classify, /score, /rerank, and Ollama's /api/chat and /api/generate. So /v1/chat/completions (OpenAI, vLLM), /chat/completions
// (DeepSeek, Perplexity, LiteLLM), /openai/deployments/{deployment}/chat/completions
// (Azure OpenAI, whose deployment is the model when the body names none),
// /models/chat/completions (Azure AI Foundry), /openai/v1/... (Azure, Groq),
// /api/v1/... (OpenRouter), /v1beta/openai/... (Gemini) are all recorded;
// /v1/models, /v1/chat/completions/{id} and /v1/messages/count_tokens are
// not. WithRoutes maps any other path pattern to an API (NewRoute), or a
// path that ends like an API but is none to no API.
//
// What each API yields (gen_ai.operation.name in parentheses; the fixtures
// in testdata, written from each server's source, show each format):
//
//   - /v1/chat/completions (chat) and /v1/completions (text_completion):
//     content chunks are SSE events whose choices carry text, content,
//     reasoning, refusal or tool calls; usage is prompt_tokens,
//     completion_tokens and prompt_tokens_details.cached_tokens (else
//     Mistral's num_cached_tokens), and
//     without completion_tokens (or with it null: OpenAI's API leaves it
//     out of an empty completion) no token was generated, 0, while the
//     prompt tokens count (the Responses API's output_tokens alike). llama.cpp's
//     timings add the cached tokens (cache_n, when usage has no details) and
//     the server-reported prefill and decode times (prompt_ms,
//     predicted_ms).
//   - /v1/responses (chat), the Responses API: content chunks are
//     "*.delta" events with a non-empty delta (response.output_text.delta
//     and the like); usage is input_tokens, output_tokens and
//     input_tokens_details.cached_tokens of the final response; its status
//     is the finish (completed: stop; incomplete: length, or stop for
//     content_filter; failed: error; cancelled: abort).
//   - /v1/messages (chat), Anthropic Messages: content chunks are
//     content_block_delta events with text, thinking or partial_json; usage
//     fields are merged over message_start and message_delta, each field's
//     last value winning. input_tokens is the uncached part (Anthropic's
//     definition, vLLM's since PR #40912): the prompt recorded is
//     input_tokens + cache_read_input_tokens + cache_creation_input_tokens,
//     the cached tokens cache_read_input_tokens. stop_reason max_tokens is
//     length; end_turn, stop_sequence and tool_use are stop.
//   - /v1/embeddings (embeddings) and vLLM's pooling endpoints /pooling,
//     /classify, /score, /rerank (pooling): prompt tokens and latency; no
//     generation (generation tokens 0), no chunks, no finish reason (a
//     complete 200 body is stop).
//   - Ollama's /api/chat (chat) and /api/generate (text_completion): NDJSON
//     objects (streamed unless the request says "stream": false), a content
//     chunk per object with content, response or thinking text; the done
//     object gives done_reason, prompt_eval_count (the prompt tokens,
//     cached ones included: no cached count is reported; up to v0.24.0,
//     v0.17.4 @ cc90a035 among them, runner/llamarunner/runner.go and
//     runner/ollamarunner/runner.go set it to the prompt's length before
//     the cache slot is loaded; from v0.30.0, commit 9db4bdb,
//     llm/llama_server.go sums llama-server's cache_n and prompt_n),
//     eval_count, and prompt_eval_duration
//     and eval_duration, in ns, recorded as
//     vllm:request_prefill_time_seconds and
//     vllm:request_decode_time_seconds.
//   - Ollama's /api/embed and its legacy /api/embeddings (embeddings): one
//     JSON object, no generation, no finish reason (a complete 200 body is
//     stop). /api/embed's prompt_eval_count, summed over its input (a
//     string or a list of them), is the prompt tokens; Ollama leaves it out
//     when 0 (an empty input), which is no usage. total_duration and
//     load_duration are not recorded: neither is a prefill time
//     (total_duration spans the whole request, the load included). The legacy endpoint answers the embedding
//     alone, no token count: its request is recorded with its latency and
//     finish, no tokens (server/routes.go's EmbedHandler and
//     EmbeddingsHandler, v0.17.4 @ cc90a035 and main @ fb307609). Their
//     requests are read for the model alone.
//
// Event streams are read as the SSE standard reads them: lines end in
// "\n", "\r\n" or "\r", and the data lines of one event are joined by a
// line feed, so a JSON document may span several. A response body that
// starts with a UTF-8 byte order mark is read past it: an event stream as
// the standard says, a JSON body as Python's json.loads reads bytes
// (OpenAI's Python client reads a body so), an NDJSON stream alike.
//
// Prefill and decode times are the server's own figures (Ollama, llama.cpp;
// stats.ObservedRequest.ServerTimes), not observed: a gateway cannot see
// when a server starts or ends a prefill. With n > 1 choices, the time per
// output token is per choice (stats.ObservedRequest.TimePerOutputToken):
// usage sums the choices' tokens, so what is recorded is the token-weighted
// mean of the choices' own times per output token, sum over choices of
// (last - first chunk) / (completion tokens - n); up to 16 choices are
// timed one by one.
//
// A gateway cannot know, so does not record: iteration tokens, queue and
// inference times, prefill and decode times unless the server reports
// them, KV cache usage, preemptions, prefix cache lookups, waiting
// requests, the split of cached tokens between local hits and transferred
// KV (beyond the leg's role, see below), and the per-token times of a chunk
// carrying several tokens. An Engine fed by a front end should not also be
// fed engine steps (see instrument.Engine.RequestStarted).
//
// # Request bodies as clients write them
//
// The request's model, stream, n and max_tokens (max_completion_tokens,
// max_output_tokens) are read as vLLM reads them: past one leading UTF-8
// byte order mark, which Python's json.loads skips in bytes (a mark after
// white space, or a second one, is not JSON), JSON string escapes
// decoded, the last of duplicate keys winning (Python's json), NaN and
// Infinity taken as Python takes them (numbers no parameter accepts),
// containers nested up to 1,024 deep (Python's json reads about 1,000); n
// and max_tokens as pydantic's lax int (100, 100.0, "100", true; not
// 100.5), max_completion_tokens winning over max_tokens when both are set
// (vLLM's max_completion_tokens or max_tokens); stream and
// stream_options.include_usage as pydantic's lax bool (true, 1, "true",
// "1", "yes", "on", "t", "y" and their false counterparts,
// case-insensitive). Ollama's /api/generate and /api/chat are read as
// Ollama reads them: model, stream, and options.num_predict as max_tokens
// (a JSON number, truncated toward zero; 0, -1 for infinite and -2 for
// filling the context give none, as an absent max_tokens; top-level
// max_tokens and n, which Ollama ignores, are not read). A model that is
// not a string, or is longer than 256 bytes, is "" (WithEngineFor). A count or parameter above
// stats.MaxRequestTokens (2^27), in a request or a response, is dropped
// for that request alone and reported through the error handler
// (ErrDropped), once per request or response that a handler and its
// transport both read; the request is recorded without it and nothing a client
// sends makes later requests unrecordable. WithIncludeUsage's rewrite
// (AskUsage) reads a body with a byte order mark too, and writes the body
// anew without it; it rewrites only a request that is recorded: one that
// WithEngineFor maps to nil passes on as it came, and so does one whose
// include_usage is no bool (vLLM refuses it). StreamsWithoutUsage tells a
// proxy that rewrites requests itself which ones the handler rewrites.
//
// # Finish reasons
//
// finish_reason stop, length, abort, error and repetition map to vLLM's
// (Anthropic's stop_reason and Ollama's done_reason too); tool_calls,
// function_call, content_filter and other values end a generation normally
// and count as stop. A request of several choices (n > 1, or a batch of
// prompts to /v1/completions) takes the worst, whether they come in one
// document or in a stream's chunks: length over stop, abort and error over
// both. An HTTP status of 400 or above, or an error event in a stream, is
// an error. A client that goes away before the finish (its request context
// canceled, or a write failing) is an abort; so is one that goes away
// before the response's status is written: a status written then reached
// no one (httputil.ReverseProxy's default error handler writes 502 to a
// client that has gone), unless what was written shows a finish. A
// response that says all it had to but names no finish reason is stop: a
// whole JSON document (a background Responses API response, queued), a
// stream that sent [DONE] (Snowflake's do, with no finish_reason),
// Anthropic's message_stop, Ollama's done. One that ends without a finish
// reason or its end while its client is still there (a stream cut
// upstream, a body that is not JSON) is an error: the server, not the
// client, ended it.
//
// # Admission refusals
//
// A vLLM with --max-num-queued-reqs or --max-num-queued-tokens refuses a
// request it would not queue with HTTP 503 and one of two fixed error
// messages. The handler counts each such response it writes to its client
// (an upstream's passed on) in vllm:admission_rejections_total by the limit
// the message names, and records the request with ErrorType
// stats.ErrorAdmissionRejected: in no vLLM request family, since vLLM
// refuses it before any engine sees it (its
// tests/v1/engine/test_admission_control.py @00ec631b; see
// instrument.Engine.RecordRequest). Any other 503 is a
// failed request.
// # Why a request failed
//
// A request that failed or was aborted carries why
// (stats.ObservedRequest.ErrorType: the error.type of
// gen_ai.server.request.duration and gen_ai.client.operation.duration).
// The body of a status of 400 or above is read, its first 64 KiB, as one
// error document of any upstream's shape: OpenAI's and vLLM's
// {"error":{"type","code","message"}}, vLLM's older one with them at the
// root, Anthropic's {"type":"error","error":{"type":...}}, Azure's,
// Gemini's array of them, Ollama's {"error":"..."}; an error a stream
// reports (an "error" member, Anthropic's error event, the Responses API's
// error event and failed response) is read alike. In order:
//
//   - context_length_exceeded and admission_rejected, which the status
//     cannot tell: a type or code such as context_length_exceeded or
//     llama.cpp's exceed_context_size_error, or a message saying it
//     (OpenAI's, DeepSeek's and vLLM's "maximum context length",
//     vLLM's "longer than the maximum model length", SGLang's and
//     Mistral's "context length", Anthropic's "prompt is too long");
//     vLLM's admission refusal, the 503 its front end answers at
//     --max-num-queued-reqs ("The engine is currently busy and cannot
//     accept new requests") or --max-num-queued-tokens ("The engine has
//     reached its prefill token backlog limit");
//   - a 429 is rate_limited when its body is the provider's error document
//     (an "error" member, or "type" or "object" "error" at its root), and
//     gateway_rate_limited, a server in between's, when it is not (empty,
//     text, HTML, {"message": ...}: Envoy's, nginx's, an API gateway's) or
//     when Envoy marks it (x-envoy-ratelimited);
//   - a cause the type or code names: rate_limited (rate_limit_error,
//     rate_limit_exceeded, insufficient_quota, RESOURCE_EXHAUSTED),
//     overloaded (overloaded_error, or a message saying "overloaded" or
//     "server busy": Ollama's full queue), authentication
//     (authentication_error, invalid_api_key), permission, not_found
//     (model_not_found, not_found_error, DeploymentNotFound: a 400 the
//     Responses API answers for an unknown model is not_found), timeout;
//   - the status: 401 authentication, 403 permission, 404 not_found, 408
//     and 504 timeout, 400, 413 and 422 invalid_request, 499
//     client_canceled, 529 overloaded, any other 5xx server_error;
//   - a generic type (invalid_request_error, BadRequestError: invalid_request;
//     api_error, server_error, InternalServerError: server_error), else
//     _OTHER.
//
// With no response, the error that ended it says why: the context
// canceled (the client went away) is client_canceled, its deadline or a
// timeout of the connection (http.Transport's ResponseHeaderTimeout) a
// timeout, any other (connection refused or reset, a DNS or TLS failure)
// upstream_unreachable. A handler whose response does not say why (an
// httputil.ReverseProxy's 502 with no body, a body cut) takes it from the
// last leg its transport sent when that got no response or timed out. A
// client that goes away is client_canceled (an abort); an abort the server
// reports (finish reason abort) has no error.type; a stream cut while its
// client stays is _OTHER.
//
// # HTTP server families
//
// WithHTTPMetrics adds the HTTP families vLLM's API server exports through
// prometheus-fastapi-instrumentator, which vLLM's overview dashboard reads
// (views.HTTPFamilies): http_requests_total{handler,method,status},
// http_request_duration_seconds{handler,method} and
// http_request_duration_highr_seconds, for every request the handler
// serves, on any path and method, from its arrival to the end of its
// handler. status is the class ("2xx" ... "5xx"), handler the route
// template (the ServeMux pattern's path, what the route function returns,
// or the pattern of the route the path matches: /v1/chat/completions,
// /openai/deployments/{deployment}/chat/completions, and
// /{prefix...}/v1/chat/completions for a base path the package does not
// know), "none" for a request no route took, as the instrumentator groups
// them: no part of a path a client chose becomes a label. They carry no model_name or engine. vLLM leaves /metrics,
// /health and a few more paths out of them
// (vllm/entrypoints/serve/instrumentator/metrics.py @ 02a69ad2); a server does the
// same by serving those paths beside the handler, not through it, as
// example/pd does with /metrics. A request whose client left before its
// status was written counts as 2xx, whatever status was then written to no
// one, as vLLM's API server counts a client that disconnected before its
// response: with_cancellation
// (vllm/frontend/entrypoints/serve/utils/api_utils.py @ 055e47c2) makes the
// route return None, which FastAPI answers 200 (fastapi/routing.py @
// c3f316b7), and prometheus-fastapi-instrumentator counts the status the
// response starts with (middleware.py @ c1c1fb64).
//
// # Transport and P/D routers
//
// NewTransport records each request it sends (a leg) per backend, with the
// OpenTelemetry GenAI client metrics (gen_ai.client.operation.duration,
// gen_ai.client.operation.time_to_first_chunk,
// gen_ai.client.operation.time_per_output_chunk, gen_ai.client.token.usage)
// and the backend and backend.role attributes (WithBackend, or per request
// ContextWithBackend). Both sides set gen_ai.operation.name from the
// endpoint, as listed above (stats.ObservedRequest.Operation), and time
// chunks alike: gen_ai.client.operation.time_per_output_chunk is per
// choice as vllm:inter_token_latency_seconds is. The
// response body is observed as the caller reads it; closing it before the
// response completed is an abort.
//
// The GenAI metrics carry gen_ai.provider.name, the Recorder's
// (instrument.WithGenAI): ProviderName gives the conventions' value for an
// upstream's host (openai for api.openai.com, azure.ai.openai for
// *.openai.azure.com, ...), self_hosted for a server of one's own.
//
// A router ties a client request to its legs through the Trace in the
// request's context: NewHandler puts one there, and the transport, called
// with that context, adds each leg (backend, role, start, status, and what
// it observed: time to first chunk, duration, usage, finish reason). The
// client request is recorded once, by the handler, from what the router
// sends its client, but for its cached prompt tokens when a leg went to a
// backend of role instrument.RoleDecode: vLLM's decode response reports in
// cached_tokens either what the decode instance did not compute (its own
// prefix-cache hits and the KV it received) or, since vLLM PR #54222, the
// prefill instance's count, and nothing in it says which. The handler
// takes the prefill leg's count instead (Trace.PrefillCached: the
// remote_prefill_cached_tokens of the kv_transfer_params it returned, else
// its usage's cached_tokens) as local_cache_hit, the rest local_compute;
// without one, the decode leg's cached tokens as external_kv_transfer
// (docs/metrics.md, "P/D router"). When the
// trace has a prefill and a decode leg, the handler also records, once,
// the legs' pairing (Trace.PD, instrument.Engine.RecordPDLegs):
// router.pd.prefill_leg.duration, router.pd.handoff.duration and
// router.pd.decode_leg.time_to_first_chunk. Whenever its transport sent
// legs, the handler records at the request's end how many
// (Trace.Attempts, infermetrics.gateway.request.attempts): 1, or more when
// a gateway retried or fell back to another backend. The client metrics,
// and the server ones of a handler's requests, carry the model the
// response named (gen_ai.response.model, at most
// instrument.MaxResponseModels per Engine).
//
// # HTTP stacks
//
// The handler wraps any http.Handler: net/http's ServeMux, an
// httputil.ReverseProxy, gin, echo, over HTTP/1.1 and HTTP/2 (each proven
// in openaihttp/internal/stacktest, a module of its own). The
// ResponseWriter it passes on is wrapped with github.com/felixge/httpsnoop,
// as otelhttp's is (net/http's HTTP/1 writer with a type of its own with
// the same methods, which allocates less): it has exactly the optional
// interfaces of the one it got (http.Flusher, http.Hijacker,
// http.CloseNotifier, which gin's Context.Stream asserts, io.ReaderFrom,
// http.Pusher) and Unwrap, for http.ResponseController. A Flush before the first Write sends the
// header once. A panic of the inner handler is re-raised after the
// request is recorded: http.ErrAbortHandler, which a ReverseProxy raises
// when its client hangs up, as the response stood (an abort when the
// client went away), any other as an HTTP 500 error.
//
// # Content encodings
//
// A response body in Content-Encoding gzip, x-gzip or deflate (zlib or
// raw) is observed decoded, on both sides, while the client gets the bytes
// exactly as the server sent them: a decoder beside the response decodes
// into one fixed buffer as the bytes pass, so a decompression bomb costs
// CPU, not memory. Other encodings (br, zstd: no library beyond the
// standard one is taken for them) are not observed: the request is
// recorded with its status and latency, tokens unknown, as stop (error for
// a status of 400 or above, abort when the client went away), never an
// error. A transport whose base transport decompressed the body itself
// (http.Response.Uncompressed) observes the decoded body it passes on.
//
// # Bounds
//
// Nothing a client sends makes later requests unrecordable or grows series
// or memory without bound. Counts above stats.MaxRequestTokens (max_tokens,
// n, usage) are dropped for their request alone and reported through the
// error handler. A document nested deeper than 1,024 levels (Python's
// json refuses one about as deep), or whose contexts read (choices,
// usage, a Responses event's response, an Anthropic message) nest deeper
// than 32, is not read, as a body that is not JSON. Backends past 1,024
// per Engine are recorded as
// instrument.BackendOther; the HTTP families keep 256 handler values per
// Engine, then "none". The model a request names reaches WithEngineFor,
// whose function must map it to a bounded set of Engines.
//
// # Attribution and prices
//
// WithAttribution records each request for its caller too: each dimension
// of an instrument.Attribution takes its value from a source, a request
// header (FromHeader: X-Tenant, OpenAI-Project, ...; credential headers are
// refused), the body's end-user identifier (FromUser: OpenAI's "user",
// Anthropic's "metadata.user_id") or the API key (FromAPIKey:
// Authorization's Bearer token, x-api-key or api-key, as the first 12 hex
// digits of HMAC-SHA256(salt, key), never the key itself). WithPrices
// prices each request with usage by its model and its response's model
// (a Pricer, such as the pricing package's Table, or for one provider's
// traffic its Table.ForProvider of ProviderName(host)). The Engines the handler
// records on take them with instrument.WithAttribution and
// instrument.WithPriceTable, and record the usage families: tokens by kind,
// requests by finish reason and error type, cost and what it would have
// been without a prompt cache, unpriced requests, duration and TTFT (see
// docs/metrics.md). Values are bounded by the Attribution: a client cannot
// grow the series past its caps.
//
// # Cost
//
// Neither side holds a response: they parse it as it passes, in constant
// memory, after handing each write on (the handler) or as the caller reads
// it (the transport). Request bodies are read up to WithMaxRequestBody
// bytes to learn model, stream, n and max_tokens, then passed on whole and
// unchanged. Per content chunk nothing is allocated (a 512-chunk stream
// allocates what a 256-chunk one does: openaihttp/internal/benchcmp, whose
// times against otelhttp are in docs/benchmarks.md). Recording errors go
// to otel.Handle (WithErrorHandler); no input makes them panic.
//
// A program that wires both, a handler whose response body is the body of
// a leg its transport sent, passed on unchanged and unencoded (an
// httputil.ReverseProxy with NewTransport, a router relaying its decode
// leg), reads each byte once. The handler takes what the transport read of
// each write: the finish, usage and content chunks, the chunks timed by
// its own clock, when it writes them. Anything else it writes (an error
// page, a read changed, split or held, bytes of its own, another leg's) it
// reads itself, on from where the leg's reading stood, so it records
// exactly what reading every byte would. To compare, the transport keeps a
// copy of a leg's last read (up to 16 KiB) until the handler writes it.
// Likewise a transport sends a request body its handler read and passed on
// unread as it is, without reading it again, when it gets that body itself
// (a router that sends r.Body); httputil.ReverseProxy sends it wrapped in a
// reader of its own, which the transport reads again unless the proxy's
// Rewrite calls ForwardBody.
package openaihttp
