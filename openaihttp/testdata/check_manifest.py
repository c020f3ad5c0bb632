#!/usr/bin/env python3
"""Check that manifest.json matches the fixture files it lists.

Re-derives, from each body, what an observer should see (content chunks per choice,
finish reasons, usage, server-reported prefill and decode seconds, outcome) and compares it
with the manifest: OpenAI-compatible chat and completions, the Responses API, Anthropic
Messages, embeddings and pooling, Ollama's native NDJSON. Standard library only. Run: python3 check_manifest.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = {"vllm", "sglang", "ollama", "llamacpp"}
OUTCOMES = {"stop", "length", "abort", "error"}
KEYS = {"file", "server", "endpoint", "path", "stream", "status", "request", "content_chunks",
        "finish_reasons", "prompt_tokens", "completion_tokens", "cached_tokens", "prefill_seconds",
        "decode_seconds", "outcome", "note"}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
         "messages": "/v1/messages", "embeddings": "/v1/embeddings", "rerank": "/rerank", "score": "/score",
         "apichat": "/api/chat", "apigenerate": "/api/generate", "apiembed": "/api/embed",
         "apiembeddings": "/api/embeddings"}
LENGTH = {"length", "max_tokens", "max_output_tokens"}


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def read_usage(u):
    """(prompt, completion, cached) or all None when usage is absent or malformed."""
    if not isinstance(u, dict):
        return None, None, None
    pt, ct = u.get("prompt_tokens"), u.get("completion_tokens")
    if not is_int(pt) or not is_int(ct):
        return None, None, None
    d = u.get("prompt_tokens_details")
    if d is None:
        return pt, ct, None
    if not isinstance(d, dict) or ("cached_tokens" in d and not is_int(d["cached_tokens"])):
        return None, None, None
    return pt, ct, d.get("cached_tokens")


def parse_sse(text):
    """Events as raw data strings: 'data: ...' lines, each event optionally led by one
    'event: ...' line, events separated by a blank line."""
    assert "\r" not in text, "CR in SSE body"
    parts = text.split("\n\n")
    assert parts[-1] == "", "body does not end with a blank line"
    out = []
    for p in parts[:-1]:
        lines = p.split("\n")
        if len(lines) == 2 and lines[0].startswith("event: "):
            lines = lines[1:]
        assert len(lines) == 1 and lines[0].startswith("data: "), "bad SSE framing: %r" % p[:60]
        out.append(lines[0][len("data: "):])
    return out


def timings(ev, got):
    t = ev.get("timings")
    if isinstance(t, dict):  # llama.cpp
        got["prefill_seconds"], got["decode_seconds"] = t["prompt_ms"] / 1000, t["predicted_ms"] / 1000


def outcome_of(error, finish):
    if error:
        return "error"
    if any(f == "" for f in finish):
        return "abort"
    if any(f in LENGTH for f in finish):
        return "length"
    return "stop"


def observe_responses(m, body):
    """OpenAI Responses API: *.delta events with text; the final response's status and usage."""
    chunks, finish, usage, error = 0, "", None, False
    docs = [json.loads(d) for d in parse_sse(body)] if m["stream"] else [{"type": "", "response": json.loads(body)}]
    for ev in docs:
        if ev["type"] == "error":
            error = True
        if ev["type"].endswith(".delta") and isinstance(ev.get("delta"), str) and ev["delta"]:
            chunks += 1
        r = ev.get("response") or {}
        st = r.get("status")
        if st in ("completed", "incomplete", "failed", "cancelled"):
            reason = (r.get("incomplete_details") or {}).get("reason")
            finish = {"completed": "stop", "failed": "error", "cancelled": "abort"}.get(st, reason)
            error = error or st == "failed"
        if r.get("usage"):
            usage = r["usage"]
    pt = ct = cached = None
    if usage:
        pt, ct, cached = usage["input_tokens"], usage["output_tokens"], usage["input_tokens_details"]["cached_tokens"]
    return dict(content_chunks=chunks, finish_reasons=[finish], prompt_tokens=pt, completion_tokens=ct,
                cached_tokens=cached, outcome=outcome_of(error, [finish]))


def observe_messages(m, body):
    """Anthropic Messages: usage fields merged over message_start and message_delta; the
    prompt is input + cache reads + cache writes."""
    chunks, finish, u, error = 0, "", {}, False
    if m["stream"]:
        for d in parse_sse(body):
            if d == "[DONE]":
                continue
            ev = json.loads(d)
            t = ev["type"]
            error = error or t == "error"
            if t == "message_start":
                u.update(ev["message"].get("usage") or {})
            if t == "content_block_delta":
                dl = ev["delta"]
                if any(isinstance(dl.get(k), str) and dl[k] for k in ("text", "thinking", "partial_json")):
                    chunks += 1
            if t == "message_delta":
                finish = ev["delta"].get("stop_reason") or finish
                u.update(ev.get("usage") or {})
    else:
        ev = json.loads(body)
        finish, u = ev.get("stop_reason") or "", ev.get("usage") or {}
    pt = ct = cached = None
    if "input_tokens" in u and "output_tokens" in u:
        pt = u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
        ct, cached = u["output_tokens"], u.get("cache_read_input_tokens")
    return dict(content_chunks=chunks, finish_reasons=[finish], prompt_tokens=pt, completion_tokens=ct,
                cached_tokens=cached, outcome=outcome_of(error, [finish]))


def observe_pooling(m, body):
    """Embeddings and pooling: a prompt, no generation, no finish reason."""
    u = json.loads(body).get("usage") or {}
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    return dict(content_chunks=0, finish_reasons=[""], prompt_tokens=u.get("prompt_tokens"),
                completion_tokens=0, cached_tokens=cached, outcome="stop")


def observe_ollama(m, body):
    """Ollama native: NDJSON objects (one when not streamed); the done one has the counts
    and the durations in ns."""
    lines = body.split("\n")
    assert lines[-1] == "" or not m["stream"], "NDJSON body does not end with a newline"
    chunks, finish, error, got = 0, "", False, {}
    pt = ct = None
    docs = [json.loads(l) for l in lines if l]
    for ev in docs:
        if "error" in ev:
            error = True
            continue
        text = ev["message"].get("content") if "message" in ev else ev.get("response")
        if m["stream"] and text:
            chunks += 1
        if ev.get("done"):
            finish = ev.get("done_reason") or "stop"
            pt, ct = ev.get("prompt_eval_count", 0), ev.get("eval_count", 0)
            got["prefill_seconds"] = ev.get("prompt_eval_duration", 0) / 1e9
            got["decode_seconds"] = ev.get("eval_duration", 0) / 1e9
    got.update(content_chunks=chunks, finish_reasons=[finish], prompt_tokens=pt, completion_tokens=ct,
               cached_tokens=None, outcome=outcome_of(error, [finish]))
    return got


def observe_ollama_embed(m, body):
    """Ollama's /api/embed (prompt_eval_count, left out when 0) and legacy /api/embeddings
    (no count): one JSON object, no generation, no finish reason."""
    pt = json.loads(body).get("prompt_eval_count")
    return dict(content_chunks=0, finish_reasons=[""], prompt_tokens=pt,
                completion_tokens=None if pt is None else 0, cached_tokens=None, outcome="stop")


def observe(m, body):
    got = dict(prefill_seconds=None, decode_seconds=None)
    if m["status"] < 400:
        other = {"responses": observe_responses, "messages": observe_messages, "embeddings": observe_pooling,
                 "rerank": observe_pooling, "score": observe_pooling, "apichat": observe_ollama,
                 "apigenerate": observe_ollama, "apiembed": observe_ollama_embed,
                 "apiembeddings": observe_ollama_embed}.get(m["endpoint"])
        if other:
            got.update(other(m, body))
            return got
    n = m["request"].get("n") or 1
    chunks, finish = [0] * n, [""] * n
    usage, error, done = None, False, False
    if m["status"] >= 400:
        try:
            json.loads(body)
        except ValueError:
            pass
        got.update(content_chunks=0 if n == 1 else chunks, finish_reasons=finish,
                   prompt_tokens=None, completion_tokens=None, cached_tokens=None, outcome="error")
        return got
    if m["stream"]:
        for data in parse_sse(body):
            assert not done, "event after [DONE]"
            if data == "[DONE]":
                done = True
                continue
            ev = json.loads(data)
            timings(ev, got)
            if "error" in ev and "choices" not in ev:
                error = True
                continue
            if ev.get("usage") is not None:
                usage = ev["usage"]  # the last usage seen wins (Ollama sends zeros first)
            for ch in ev.get("choices", []):
                i = ch["index"]
                text = ch["delta"].get("content") if "delta" in ch else ch.get("text")
                if isinstance(text, str) and text != "":
                    chunks[i] += 1
                if ch.get("finish_reason"):
                    finish[i] = ch["finish_reason"]
    else:
        ev = json.loads(body)
        timings(ev, got)
        usage = ev.get("usage")
        for ch in ev["choices"]:
            finish[ch["index"]] = ch.get("finish_reason") or ""
    pt, ct, cached = read_usage(usage)
    got.update(content_chunks=chunks[0] if n == 1 else chunks, finish_reasons=finish,
               prompt_tokens=pt, completion_tokens=ct, cached_tokens=cached, outcome=outcome_of(error, finish))
    return got


def main():
    with open(os.path.join(HERE, "manifest.json")) as f:
        manifest = json.load(f)
    listed, bad = set(), 0
    for m in manifest:
        name = m["file"]
        listed.add(name)
        problems = []
        if set(m) != KEYS:
            problems.append("keys differ: %s" % sorted(set(m) ^ KEYS))
        if m["server"] not in SERVERS or not name.startswith(m["server"] + "_" + m["endpoint"] + "_"):
            problems.append("name/server/endpoint mismatch")
        if m["outcome"] not in OUTCOMES:
            problems.append("unknown outcome")
        if PATHS.get(m["endpoint"]) != m["path"]:
            problems.append("path %r is not the endpoint's" % m["path"])
        # Ollama's chat and generate stream by default
        streams = m["request"].get("stream", m["endpoint"] in ("apichat", "apigenerate"))
        if streams != m["stream"]:
            problems.append("request.stream differs from stream")
        if m["endpoint"] in ("chat", "completions") and m["stream"] and \
                ("_usage" in name) != bool((m["request"].get("stream_options") or {}).get("include_usage")):
            problems.append("usage/nousage in name differs from stream_options.include_usage")
        with open(os.path.join(HERE, name), newline="") as f:
            body = f.read()
        try:
            got = observe(m, body)
        except Exception as e:  # a fixture that does not parse is a finding, not a crash
            problems.append("parse: %s" % e)
            got = {}
        for k, v in got.items():
            if isinstance(v, float) and isinstance(m.get(k), float) and abs(m[k] - v) < 1e-9:
                continue
            if m.get(k) != v:
                problems.append("%s: manifest %r, body %r" % (k, m.get(k), v))
        if problems:
            bad += 1
            print("FAIL %s\n  %s" % (name, "\n  ".join(problems)))
    on_disk = {f for f in os.listdir(HERE) if f.endswith((".sse", ".json", ".txt", ".ndjson")) and f != "manifest.json"}
    for f in sorted(on_disk - listed):
        bad += 1
        print("FAIL %s: not in manifest" % f)
    print("%d fixtures, %d failing" % (len(manifest), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
