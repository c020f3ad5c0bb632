#!/usr/bin/env python3
"""Check that manifest.json matches the fixture files it lists.

Re-derives, from each body, what an observer of OpenAI-compatible traffic should see
(content chunks per choice, finish reasons, usage, outcome) and compares it with the
manifest. Standard library only. Run: python3 check_manifest.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = {"vllm", "sglang", "ollama", "llamacpp"}
OUTCOMES = {"stop", "length", "abort", "error"}
KEYS = {"file", "server", "endpoint", "stream", "status", "request", "content_chunks",
        "finish_reasons", "prompt_tokens", "completion_tokens", "cached_tokens", "outcome", "note"}


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
    """Events as raw data strings; each event must be exactly 'data: ...\\n\\n'."""
    assert "\r" not in text, "CR in SSE body"
    parts = text.split("\n\n")
    assert parts[-1] == "", "body does not end with a blank line"
    out = []
    for p in parts[:-1]:
        assert p.startswith("data: ") and "\n" not in p, "bad SSE framing: %r" % p[:60]
        out.append(p[len("data: "):])
    return out


def observe(m, body):
    n = m["request"].get("n") or 1
    chunks, finish = [0] * n, [""] * n
    usage, error, done = None, False, False
    if m["status"] >= 400:
        try:
            json.loads(body)
        except ValueError:
            pass
        return dict(content_chunks=0 if n == 1 else chunks, finish_reasons=finish,
                    prompt_tokens=None, completion_tokens=None, cached_tokens=None, outcome="error")
    if m["stream"]:
        for data in parse_sse(body):
            assert not done, "event after [DONE]"
            if data == "[DONE]":
                done = True
                continue
            ev = json.loads(data)
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
        usage = ev.get("usage")
        for ch in ev["choices"]:
            finish[ch["index"]] = ch.get("finish_reason") or ""
    pt, ct, cached = read_usage(usage)
    if error:
        outcome = "error"
    elif any(f == "" for f in finish):
        outcome = "abort"
    elif any(f == "length" for f in finish):
        outcome = "length"
    else:
        outcome = "stop"
    return dict(content_chunks=chunks[0] if n == 1 else chunks, finish_reasons=finish,
                prompt_tokens=pt, completion_tokens=ct, cached_tokens=cached, outcome=outcome)


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
        if m["request"].get("stream") != m["stream"]:
            problems.append("request.stream differs from stream")
        if ("_usage" in name) != bool((m["request"].get("stream_options") or {}).get("include_usage")) and m["stream"]:
            problems.append("usage/nousage in name differs from stream_options.include_usage")
        with open(os.path.join(HERE, name), newline="") as f:
            body = f.read()
        try:
            got = observe(m, body)
        except Exception as e:  # a fixture that does not parse is a finding, not a crash
            problems.append("parse: %s" % e)
            got = {}
        for k, v in got.items():
            if m.get(k) != v:
                problems.append("%s: manifest %r, body %r" % (k, m.get(k), v))
        if problems:
            bad += 1
            print("FAIL %s\n  %s" % (name, "\n  ".join(problems)))
    on_disk = {f for f in os.listdir(HERE) if f.endswith((".sse", ".json", ".txt")) and f != "manifest.json"}
    for f in sorted(on_disk - listed):
        bad += 1
        print("FAIL %s: not in manifest" % f)
    print("%d fixtures, %d failing" % (len(manifest), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
