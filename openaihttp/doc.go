// Package openaihttp records OpenAI-compatible HTTP traffic, for Go programs
// that see requests but no engine step: servers wrapping an engine behind
// /v1/chat/completions and /v1/completions, gateways, and prefill/decode
// (P/D) routers in front of vLLM, SGLang, Ollama or llama.cpp servers. It
// has the shape of otelhttp: NewHandler wraps a server's http.Handler,
// NewTransport a client's http.RoundTripper. Like package instrument, it
// imports the OpenTelemetry API only; its measurements go through the same
// instruments, views and exporters as an engine's.
//
// # What the handler records
//
// On the instrument.Engine of WithEngine (or WithEngineFor, by model), for
// each POST to a completions endpoint, through Engine.RecordRequest:
// vllm:request_success_total by finish reason, the e2e latency, the
// request's max_tokens and n, and, for a streamed response (SSE), the time
// to its first content chunk as TTFT and the time between content chunks
// as vllm:inter_token_latency_seconds. A content chunk is an event whose
// choices carry text, content, reasoning or tool calls; a chunk carrying
// several tokens is one value, so with multi-token chunks these are
// inter-chunk latencies, fewer and larger than per-token ones. When the
// response reports usage (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens) it also records the prompt tokens by
// source, the cached tokens, the generation tokens, the request token
// histograms and the time per output token; without usage none of them
// (streaming clients get usage with stream_options.include_usage, which
// WithIncludeUsage adds to requests). Without prompt_tokens_details the
// cached tokens are unknown and the prompt counts as computed. Requests in
// flight are vllm:num_requests_running. With instrument.WithGenAISemconv the
// Recorder also records the GenAI server histograms (views.Semconv) by the
// conventions' rules: the time per output token of successful requests with
// usage and more than one output token only.
//
// It cannot observe, so does not record: iteration tokens, queue, prefill,
// decode and inference times, KV cache usage, preemptions, prefix cache
// lookups, waiting requests. An Engine fed by a front end should not also
// be fed engine steps (see instrument.Engine.RequestStarted).
//
// # Finish reasons
//
// finish_reason stop, length, abort, error and repetition map to vLLM's;
// tool_calls, function_call, content_filter and other values end a
// generation normally and count as stop. A request of several choices takes
// the worst: length over stop, abort and error over both. An HTTP status of
// 400 or above, or an error event in a stream, is an error. A client that
// goes away before the finish (its request context canceled, or a write
// failing) is an abort. A response that ends without a finish reason while
// its client is still there (a stream cut upstream, a non-JSON body) is an
// error: the server, not the client, ended it.
//
// # Transport and P/D routers
//
// NewTransport records each request it sends (a leg) per backend, with the
// OpenTelemetry GenAI client metrics (gen_ai.client.operation.duration,
// gen_ai.client.operation.time_to_first_chunk,
// gen_ai.client.operation.time_per_output_chunk, gen_ai.client.token.usage)
// and the backend and backend.role attributes (WithBackend, or per request
// ContextWithBackend). Both sides set gen_ai.operation.name from the
// endpoint: chat for /v1/chat/completions, text_completion for
// /v1/completions (stats.ObservedRequest.Operation). The response body is observed as the caller reads
// it; closing it before the response completed is an abort.
//
// A router ties a client request to its legs through the Trace in the
// request's context: NewHandler puts one there, and the transport, called
// with that context, adds each leg (backend, role, start, status, and what
// it observed: time to first chunk, duration, usage, finish reason). The
// client request is recorded once, by the handler, from what the router
// sends its client; a leg to a backend of role instrument.RoleDecode makes
// its cached prompt tokens external_kv_transfer, not local_cache_hit, since
// the decode instance received them from the prefill instance. When the
// trace has a prefill and a decode leg, the handler also records, once,
// the legs' pairing (Trace.PD, instrument.Engine.RecordPDLegs):
// router.pd.prefill_leg.duration, router.pd.handoff.duration and
// router.pd.decode_leg.time_to_first_chunk.
//
// # HTTP stacks
//
// The handler wraps any http.Handler: net/http's ServeMux, an
// httputil.ReverseProxy, gin, echo, over HTTP/1.1 and HTTP/2 (each proven
// in openaihttp/internal/stacktest, a module of its own). The
// ResponseWriter it passes on is wrapped with github.com/felixge/httpsnoop,
// as otelhttp's is: it has exactly the optional interfaces of the one it
// got (http.Flusher, http.Hijacker, http.CloseNotifier, which gin's
// Context.Stream asserts, io.ReaderFrom, http.Pusher) and Unwrap, for
// http.ResponseController. A Flush before the first Write sends the
// header once. A panic of the inner handler is re-raised after the
// request is recorded: http.ErrAbortHandler, which a ReverseProxy raises
// when its client hangs up, as the response stood (an abort when the
// client went away), any other as an HTTP 500 error.
//
// WithHTTPMetrics adds the HTTP families vLLM's API server exports through
// prometheus-fastapi-instrumentator (http_requests_total,
// http_request_duration_seconds, http_request_duration_highr_seconds), for
// every request the handler serves; see views.HTTPFamilies.
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
// error handler. Backends past 1,024 per Engine are recorded as
// instrument.BackendOther; the HTTP families keep 256 handler values per
// Engine, then "none". The model a request names reaches WithEngineFor,
// whose function must map it to a bounded set of Engines.
//
// # Cost
//
// Neither side holds a response: they parse it as it passes, in constant
// memory, after handing each write on (the handler) or as the caller reads
// it (the transport). Request bodies are read up to WithMaxRequestBody
// bytes to learn model, stream, n and max_tokens, then passed on whole and
// unchanged. Per content chunk nothing is allocated. Recording errors go
// to otel.Handle (WithErrorHandler); no input makes them panic.
package openaihttp
