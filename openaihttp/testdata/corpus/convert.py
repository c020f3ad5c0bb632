#!/usr/bin/env python3
"""Builds the replay corpus (README.md) from other projects' recordings of
real provider traffic (VCR cassettes), read from git snapshots at the commits
named in SOURCES.

    python3 convert.py [--mirror DIR]   # DIR holds owner+name/repo git dirs

It rewrites manifest.json and bodies/ beside this script. Generated and user
text, ids and embedded files are replaced with made-up values of the same
shape; numbers, keys, framing and encodings are kept. The expected figures
are computed here from each API's documents, independently of the Go code.
Needs Python 3.9+ and PyYAML.
"""
import argparse
import base64
import collections
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import zlib

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))

# (repository, commit, folders): every cassette under the folders is read.
SOURCES = [
    ("envoyproxy/ai-gateway", "c217da8a539570ba3f6014a60c2687c29a945f1f",
     ["tests/internal/testopenai/cassettes"]),
    ("DataDog/dd-trace-py", "3bb9ecda22830e3303b18b0ffa5abe7586aef6a7",
     ["tests/cassettes/openai", "tests/cassettes/mistral", "tests/cassettes/anthropic",
      "tests/cassettes/azure_openai", "tests/contrib/openai/cassettes",
      "tests/contrib/anthropic/cassettes", "tests/contrib/litellm/cassettes"]),
    ("pydantic/pydantic-ai", "4fda38988f2939fa6ea9cdefcf120693e10ef491",
     ["tests"]),
]

# The final path segments openaihttp observes under any base path
# (openaihttp/request.go, endpoints).
OBSERVED = ["/chat/completions", "/completions", "/responses", "/v1/messages",
            "/embeddings", "/pooling", "/classify", "/score", "/rerank", "/api/chat",
            "/api/generate"]

# The API of a path, by its end (with or without /v1).
APIS = [("/chat/completions", "chat"), ("/completions", "completions"),
        ("/responses", "responses"), ("/messages", "messages"),
        ("/embeddings", "embeddings"), ("/api/chat", "ollama_chat"),
        ("/api/generate", "ollama_generate")]

PROVIDERS = [
    (r"(^|\.)openai\.azure\.com$|cognitiveservices\.azure\.com$", "azure"),
    (r"^api\.openai\.com$", "openai"),
    (r"^api\.anthropic\.com$", "anthropic"),
    (r"^api\.mistral\.ai$", "mistral"),
    (r"^api\.deepseek\.com$", "deepseek"),
    (r"^openrouter\.ai$", "openrouter"),
    (r"^api\.groq\.com$", "groq"),
    (r"^api\.x\.ai$", "xai"),
    (r"^api\.perplexity\.ai$", "perplexity"),
    (r"^api\.cerebras\.ai$", "cerebras"),
    (r"huggingface\.co$", "huggingface"),
    (r"^api\.z\.ai$", "zai"),
    (r"^api\.together\.xyz$", "together"),
    (r"^api\.fireworks\.ai$", "fireworks"),
    (r"^ollama\.com$|:11434$", "ollama"),
    (r"^0\.0\.0\.0:4000$|^localhost:4000$", "litellm"),
    (r"crusoecloud\.com$", "crusoe"),
    (r"heroku\.com$", "heroku"),
    (r"^bedrock-mantle\.", "bedrock-mantle"),
    (r"snowflakecomputing\.com$", "snowflake"),
    (r"generativelanguage\.googleapis\.com$", "gemini"),
    (r"^api\.moonshot\.ai$", "moonshot"),
    (r"^api\.sambanova\.ai$", "sambanova"),
    (r"^api\.nebius\.", "nebius"),
    (r"gpustack", "gpustack"),
]

# Every string value is replaced (text of the same shape, a made-up id, or
# made-up file data) but those of the keys below: the structural values the
# APIs define (and the package reads), which are kept.
KEEP_KEYS = {"model", "object", "type", "role", "finish_reason", "stop_reason", "status", "event",
             "done_reason", "native_finish_reason", "service_tier", "encoding_format", "reason", "code",
             "param", "tool_choice", "format", "detail", "voice", "truncation", "effort", "verbosity",
             "modalities", "media_type", "mime_type", "inference_geo", "error_type", "stream",
             "include_usage", "n", "max_tokens", "max_completion_tokens", "max_output_tokens",
             "name", "provider", "phase", "mode", "strict", "parallel_tool_calls", "store", "background",
             "response_format", "stop_sequence", "created", "created_at", "completed_at", "method"}
ID_KEYS = {"id", "system_fingerprint", "obfuscation", "signature", "encrypted_content", "item_id",
           "call_id", "tool_call_id", "tool_use_id", "previous_response_id", "response_id",
           "user", "safety_identifier", "prompt_cache_key", "conversation_id", "request_id",
           "fingerprint", "seed_id"}

MAX_BODY = 256 << 10  # a recording with a larger request or response is left out
MAX_RESPONSE = 96 << 10  # nor one with a larger response body
MAX_DATA = 256  # an embedded file in a request is shortened to this many characters
PER_GROUP = 40  # recordings kept per provider, API, streamed, error status and encoding


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default="/work/.mirror")
    args = ap.parse_args()
    stats = collections.Counter()
    entries, seen = [], {}
    for repo, commit, folders in SOURCES:
        gitdir = os.path.join(args.mirror, repo.replace("/", "+"), "repo")
        for path in list_cassettes(gitdir, commit, folders):
            raw = git_show(gitdir, commit, path)
            if raw is None:
                stats["cassette absent from the snapshot (4 MiB or more)"] += 1
                continue
            for idx, it in enumerate(load_cassette(path, raw)):
                rec = normalize(it)
                if rec is None:
                    stats["not an HTTP request and response (Realtime WebSocket frames, xAI gRPC samples)"] += 1
                    continue
                why = reject(rec)
                if why:
                    stats[why] += 1
                    continue
                key = hashlib.sha256(repr((rec["method"], rec["url"], rec["req_body"], rec["status"],
                                           rec["resp_body"])).encode()).hexdigest()
                if key in seen:
                    stats["duplicate of an earlier recording"] += 1
                    seen[key]["duplicates"].append(f"{repo}@{commit[:12]}:{path}#{idx}")
                    continue
                rec["source"] = {"repo": repo, "commit": commit, "path": path, "interaction": idx}
                rec["duplicates"] = []
                seen[key] = rec
                entries.append(rec)
    entries = select(entries, stats)
    out_dir = os.path.join(HERE, "bodies")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    manifest = []
    for n, rec in enumerate(entries):
        manifest.append(build_entry(n, rec, out_dir))
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    for k, v in sorted(stats.items()):
        print(f"left out: {v:5d} {k}", file=sys.stderr)
    print(f"kept: {len(manifest)} recordings", file=sys.stderr)
    print_counts(manifest)


# ---- reading the cassettes

def git_show(gitdir, commit, path):
    p = subprocess.run(["git", "-C", gitdir, "show", f"{commit}:{path}"], capture_output=True)
    return p.stdout if p.returncode == 0 else None


def list_cassettes(gitdir, commit, folders):
    out = subprocess.run(["git", "-C", gitdir, "ls-tree", "-r", "--name-only", commit, *folders],
                         capture_output=True, check=True).stdout.decode()
    return sorted(p for p in out.splitlines()
                  if "cassettes" in p.split("/") and p.endswith((".yaml", ".yml", ".json")))


class Loader(yaml.SafeLoader):
    """SafeLoader that reads vcrpy's python tags (multidict's istr header
    names) as their plain values."""


def _python_tag(loader, suffix, node):
    if isinstance(node, yaml.SequenceNode):
        v = loader.construct_sequence(node, deep=True)
        return v[0] if len(v) == 1 else tuple(v)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_scalar(node)


Loader.add_multi_constructor("tag:yaml.org,2002:python/", _python_tag)


def load_cassette(path, raw):
    try:
        d = json.loads(raw) if path.endswith(".json") else yaml.load(raw, Loader=Loader)
    except Exception:
        return []
    if isinstance(d, dict) and isinstance(d.get("interactions"), list):
        return d["interactions"]
    if isinstance(d, dict) and "request" in d and "response" in d:
        return [d]
    return []


def headers_of(h):
    """Header names lowercased, values joined, from any cassette format."""
    out = {}
    for k, v in (h or {}).items():
        if isinstance(k, tuple):
            k = k[0]
        if isinstance(v, (list, tuple)):
            v = ", ".join(str(x) for x in v)
        out[str(k).lower()] = str(v)
    return out


def as_bytes(b):
    if b is None:
        return b""
    if isinstance(b, bytes):
        return b
    if isinstance(b, str):
        return b.encode("utf-8", "surrogateescape")
    return json.dumps(b).encode()  # a parsed body


def normalize(it):
    """One interaction as method, url, headers, bodies and status; the
    response body decoded, with how it was encoded on the wire."""
    if not isinstance(it, dict):
        return None
    rq, rs = it.get("request"), it.get("response")
    if not isinstance(rq, dict) or not isinstance(rs, dict):
        return None
    url = rq.get("url") or rq.get("uri")
    if not isinstance(url, str):
        return None
    rqh, rsh = headers_of(rq.get("headers")), headers_of(rs.get("headers"))
    if "parsed_body" in rq:  # pydantic-ai: json.dumps of the parsed body, as its replay sends it
        req_body = json.dumps(rq["parsed_body"]).encode()
    else:
        req_body = as_bytes(rq.get("body"))
    notes = []
    stored_raw = None
    if "parsed_body" in rs:
        body = json.dumps(rs["parsed_body"]).encode()
        notes.append("response body re-serialized by json.dumps from the cassette's parsed_body, "
                     "as pydantic-ai's replay sends it")
    elif isinstance(rs.get("body"), dict):
        body = as_bytes(rs["body"].get("string"))
    elif "content" in rs:  # vcrpy's older httpx format
        body = as_bytes(rs.get("content"))
    else:
        body = as_bytes(rs.get("body"))
    status = rs.get("status")
    if isinstance(status, dict):
        status = status.get("code")
    if not isinstance(status, int):
        status = rs.get("code") or rs.get("status_code")
    if isinstance(status, str):
        status = int(status.split()[0]) if status.split() and status.split()[0].isdigit() else None
    if not isinstance(status, int):
        return None
    enc = rsh.get("content-encoding", "").strip().lower() or None
    if enc in ("gzip", "x-gzip"):
        if body[:2] == b"\x1f\x8b":
            stored_raw = body
            try:
                body = gzip.decompress(body)
            except Exception:
                return None
        else:
            notes.append("recorded decoded with Content-Encoding gzip; re-compressed")
    elif enc == "deflate":
        try:
            stored_raw, body = body, zlib.decompress(body)
        except Exception:
            notes.append("recorded decoded with Content-Encoding deflate; re-compressed")
    elif enc in ("br", "zstd"):
        if body[:1] not in (b"{", b"[", b"d", b"e"):
            return None  # compressed bytes this converter cannot read
        notes.append(f"recorded decoded with Content-Encoding {enc}; served identity")
        enc = None
    return base_rec(rq, url, rqh, rsh, req_body, status, body, enc, notes, stored_raw)


def base_rec(rq, url, rqh, rsh, req_body, status, body, enc, notes, stored_raw):
    if enc not in ("gzip", "x-gzip", "deflate"):
        enc = None
    return {"method": str(rq.get("method", "")).upper(), "url": url, "req_headers": rqh,
            "resp_headers": rsh, "req_body": req_body, "status": status, "resp_body": body,
            "encoding": enc, "stored_raw": stored_raw, "notes": notes}


def split_url(url):
    m = re.match(r"^[a-z]+://([^/]+)(/[^?#]*)?(\?[^#]*)?", url)
    if not m:
        return "", url, ""
    return m.group(1), m.group(2) or "/", m.group(3) or ""


def api_of(path):
    p = path.rstrip("/")
    for end, api in APIS:
        if p.endswith(end):
            return api
    return None


def provider_of(host):
    for pat, name in PROVIDERS:
        if re.search(pat, host):
            return name
    return None


def reject(rec):
    host, path, _ = split_url(rec["url"])
    if rec["method"] != "POST":
        return "not a POST"
    api = api_of(path)
    if api is None:
        return "not an API the package observes (audio, images, files, native Gemini, Bedrock...)"
    prov = provider_of(host)
    if prov is None:
        return f"host of no known provider ({host})"
    if prov in ("gemini",) and "/openai/" not in path:
        return "not an API the package observes (audio, images, files, native Gemini, Bedrock...)"
    if len(rec["req_body"]) > MAX_BODY or len(rec["resp_body"]) > MAX_BODY:
        return "request or response over 256 KiB"
    if not rec["resp_body"] and rec["status"] < 400:
        return "no response body recorded"
    rec["host"], rec["path"], rec["query"], rec["api"], rec["provider"] = host, path, _, api, prov
    return None


def select(recs, stats):
    """At most PER_GROUP recordings per provider, API, streamed, error status
    and encoding: those with the most distinct facts (tags) first, then the
    smaller; kept in source order."""
    groups = collections.defaultdict(list)
    for i, rec in enumerate(recs):
        if len(rec["resp_body"]) > MAX_RESPONSE:
            stats["response over 96 KiB"] += 1
            continue
        text = rec["resp_body"].decode("utf-8", "surrogateescape")
        exp, tags = expected(rec, text)
        key = (rec["provider"], rec["api"], exp["streamed"], rec["status"] >= 400, rec["encoding"])
        size = len(rec["resp_body"]) + min(len(rec["req_body"]), 8192)
        groups[key].append((-len(tags), size, i))
    keep = set()
    for key, g in groups.items():
        g.sort()
        keep.update(i for _, _, i in g[:PER_GROUP])
        if len(g) > PER_GROUP:
            stats[f"over {PER_GROUP} of one provider, API, streamed, status and encoding"] += len(g) - PER_GROUP
    return [r for i, r in enumerate(recs) if i in keep]


# ---- text of the same shape

LOWER = "etaoinshrdlcumwfgypbvkxjqz"
UPPER = LOWER.upper()
# Replacements by UTF-8 length, for characters written raw or as \u escapes.
MB = {2: "éàüñçöøåßæ", 3: "文字語言漢中日本人大", 4: "😀😃🙂🚀🌟🎉🍀🐍📚🔧"}


def seeded(seed, value):
    return random.Random(hashlib.sha256((seed + "\x00" + value).encode("utf-8", "surrogatepass")).digest())


def made_up_text(raw, rng):
    """The raw JSON string contents raw (escapes as written) with each letter,
    digit and non-ASCII character replaced by a made-up one of its kind;
    escapes stay escapes of the same form, everything else is kept."""
    out, i, n = [], 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\" and i + 1 < n:
            e = raw[i + 1]
            if e == "u" and i + 6 <= n and re.fullmatch(r"[0-9a-fA-F]{4}", raw[i + 2:i + 6]):
                cp = int(raw[i + 2:i + 6], 16)
                hexd = raw[i + 2:i + 6]
                if 0xD800 <= cp <= 0xDBFF and raw[i + 6:i + 8] == "\\u" and \
                        re.fullmatch(r"[dD][c-fC-F][0-9a-fA-F]{2}", raw[i + 8:i + 12] or ""):
                    emoji = rng.choice(MB[4])
                    hi, lo = surrogates(emoji)
                    out.append("\\u" + case_like(f"{hi:04x}", hexd) + "\\u" + case_like(f"{lo:04x}", raw[i + 8:i + 12]))
                    i += 12
                    continue
                if cp < 0x20 or 0xD800 <= cp <= 0xDFFF:
                    r = cp  # control characters and lone surrogates are kept
                elif cp < 0x80:
                    r = ord(replace_ascii(chr(cp), rng))
                else:
                    r = ord(rng.choice(MB[2 if cp < 0x800 else 3]))
                out.append("\\u" + case_like(f"{r:04x}", hexd))
                i += 6
                continue
            out.append(raw[i:i + 2])
            i += 2
            continue
        if ord(c) >= 0x80:
            if 0xDC80 <= ord(c) <= 0xDCFF:  # an undecodable byte (surrogateescape): kept
                out.append(c)
            else:
                out.append(rng.choice(MB[len(c.encode("utf-8", "surrogatepass"))]))
        else:
            out.append(replace_ascii(c, rng))
        i += 1
    return "".join(out)


def replace_ascii(c, rng):
    if "a" <= c <= "z":
        return rng.choice(LOWER)
    if "A" <= c <= "Z":
        return rng.choice(UPPER)
    if "0" <= c <= "9":
        return rng.choice("0123456789")
    return c


def case_like(h, like):
    return h.upper() if like.isupper() or (any(ch in "ABCDEF" for ch in like) and not any(ch in "abcdef" for ch in like)) else h


def surrogates(ch):
    cp = ord(ch) - 0x10000
    return 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)


def made_up_id(raw, rng):
    """A made-up id of raw's length and form: a leading word prefix
    (chatcmpl-, msg_, resp_...) is kept, each letter and digit after it
    replaced by one of its kind."""
    m = re.match(r"^[a-z]+[-_]", raw)
    keep = m.group(0) if m else ""
    return keep + made_up_text(raw[len(keep):], rng)


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def made_up_data(raw, rng):
    """A data URL or base64 string of the same length with made-up payload."""
    m = re.match(r"^data:[^,]*,", raw)
    keep = m.group(0) if m else ""
    body = raw[len(keep):]
    return keep + "".join(rng.choice(B64) if ch in B64 else ch for ch in body)


class Rewriter:
    """Rewrites the string values of JSON documents inside a body (JSON,
    NDJSON, or the data lines of SSE), in place, keeping every other byte."""

    def __init__(self, seed):
        self.seed = seed
        self.ids = {}
        self.shorten = False  # shorten embedded files (requests only)
        self.shortened = 0

    def replace(self, key, parent, raw):
        if key in KEEP_KEYS or (key == "message" and parent == "error"):
            return raw  # a structural value, or a provider's error message
        if key in ID_KEYS:
            if raw not in self.ids:
                self.ids[raw] = made_up_id(raw, seeded(self.seed + "id", raw))
            return self.ids[raw]
        if len(raw) > 64 and (raw.startswith("data:") or re.fullmatch(r"[A-Za-z0-9+/=\\n]+", raw)):
            if key == "embedding":
                return raw  # numbers, base64-encoded
            if self.shorten and len(raw) > MAX_DATA:
                self.shortened += 1
                raw = raw[:MAX_DATA]
            return made_up_data(raw, seeded(self.seed, raw))  # a file or image
        if key == "url" and re.match(r"^https?://", raw):
            return raw  # a public URL a test sent
        return made_up_text(raw, seeded(self.seed, raw))

    def body(self, text):
        """Rewrites body text: each JSON document in it, found at a line's
        start after an optional SSE "data:" field name. A document may span
        lines (indented JSON, an SSE event's data lines)."""
        out, st = [], None
        for line in re.split(r"(?<=\n)|(?<=\r)(?!\n)", text):
            if not line:
                continue
            content = line.rstrip("\r\n")
            ending = line[len(content):]
            prefix, payload = "", content
            m = re.match(r"^data: ?", content)
            if m:
                prefix, payload = m.group(0), content[m.end():]
            elif st is None or content == "" or content.startswith(("event:", ":")):
                st = None if content == "" else st
                if st is None and content.lstrip().startswith(("{", "[")):
                    st = _State()
                    out.append(self.scan(content, st) + ending)
                    st = st if st.stack else None
                else:
                    out.append(line)
                continue
            if st is None:
                st = _State()
            out.append(prefix + self.scan(payload, st) + ending)
            if not st.stack:
                st = None
        return "".join(out)

    def scan(self, s, st):
        """Scans s from state st, returning s with string values rewritten."""
        out, i, n = [], 0, len(s)
        while i < n:
            c = s[i]
            if st.in_string:
                j = i
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                st.buf.append(s[i:min(j, n)])
                if j >= n:
                    return "".join(out)  # the string goes on in the next line
                raw = "".join(st.buf)
                st.in_string, st.buf = False, []
                top = st.stack[-1] if st.stack else None
                if top is not None and top["obj"] and top["want_key"]:
                    top["key"] = json_unescape(raw)
                    out.append(raw + '"')
                elif top is None:
                    out.append(raw + '"')
                else:
                    key, parent = st.context()
                    out.append(self.replace(key, parent, raw) + '"')
                i = j + 1
                continue
            if c == '"' and st.stack:
                st.in_string = True
            elif c in "{[":
                key, _ = st.context()
                st.stack.append({"obj": c == "{", "name": key, "want_key": True, "key": None})
            elif c in "}]":
                if st.stack:
                    st.stack.pop()
            elif c == "," and st.stack and st.stack[-1]["obj"]:
                st.stack[-1]["want_key"] = True
            elif c == ":" and st.stack and st.stack[-1]["obj"]:
                st.stack[-1]["want_key"] = False
            out.append(c)
            i += 1
        return "".join(out)


class _State:
    """Where a scan is in a JSON document: its open containers (each with
    the key it is the value of) and a string being read."""

    def __init__(self):
        self.stack = []
        self.in_string = False
        self.buf = []

    def context(self):
        """The key of the value being read and the key of its container."""
        if not self.stack:
            return None, None
        top = self.stack[-1]
        if top["obj"]:
            return top["key"], top["name"]
        return top["name"], (self.stack[-2]["name"] if len(self.stack) > 1 else None)


def json_unescape(raw):
    try:
        return json.loads('"' + raw + '"')
    except Exception:
        return raw


# ---- what each API yields (openaihttp/doc.go)

def finish_of(reason):
    if reason in ("length", "max_tokens", "model_context_window_exceeded"):
        return "length"
    if reason in ("abort", "error", "repetition"):
        return reason
    return "stop"


WORST = ["stop", "repetition", "length", "abort", "error"]


def worst(reasons):
    return max(reasons, key=WORST.index) if reasons else None


def count(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def sse_events(text):
    """The data of each SSE event (event name, data), per the SSE spec; an
    event left open at the end is dispatched too."""
    events, data, name = [], [], None
    for line in re.split(r"\r\n|\r|\n", text):
        if line == "":
            if data:
                events.append((name, "\n".join(data)))
            data, name = [], None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data:
        events.append((name, "\n".join(data)))
    return events


def documents(text, streamed, tags, lines=False):
    """The JSON objects of a body: each SSE event's data ([DONE] left out),
    each line (NDJSON), or the body; a malformed one is tagged."""
    if not streamed:
        docs = [text]
    elif lines:
        docs = [l for l in text.splitlines() if l.strip()]
    else:
        docs = [d for _, d in sse_events(text) if d.strip() != "[DONE]"]
    for d in docs:
        try:
            o = json.loads(d)
        except Exception:
            tags.append("malformed_document")
            continue
        if isinstance(o, dict):
            yield o


def cached_of(e, usage, details_key, tags):
    """Sets e's cached tokens from a usage: its details' cached_tokens, else
    Mistral's num_cached_tokens (its non-streamed responses report that
    instead); unknown without a count, or when the count is above the
    prompt (defect 9)."""
    details = usage.get(details_key)
    n = count(details.get("cached_tokens")) if isinstance(details, dict) else None
    if n is None:
        n = count(usage.get("num_cached_tokens"))
    if n is not None:
        e["cached_tokens"] = n
        if e["cached_tokens"] > e["prompt_tokens"]:
            e["cached_tokens"] = None
            tags.append("cached_above_prompt")


def complete(text, streamed, end_type=None):
    """A body that said all it had to: a whole JSON document, or an event
    stream that sent [DONE] (or, with end_type, an event of that type)."""
    if not streamed:
        try:
            json.loads(text)
            return True
        except Exception:
            return False
    for _, d in sse_events(text):
        if d.strip() == "[DONE]":
            return True
        if end_type is not None:
            try:
                if json.loads(d).get("type") == end_type:
                    return True
            except Exception:
                pass
    return False


def is_sse(ct, text):
    return "text/event-stream" in ct or re.match(r"^(data|event):", text) is not None


def expected(rec, text):
    """The figures a replay records: finish reason, tokens (None: no usage),
    cached tokens (None: unknown), content chunks per choice."""
    api, status = rec["api"], rec["status"]
    ct = rec["resp_headers"].get("content-type", "")
    e = {"finish": None, "prompt_tokens": None, "generation_tokens": None, "cached_tokens": None,
         "content_chunks": 0, "chunks_per_choice": [], "streamed": False}
    tags = []
    streamed = is_sse(ct, text) or ("ndjson" in ct and api.startswith("ollama"))
    e["streamed"] = streamed
    if api.startswith("ollama") and not streamed and text.count("\n") > 1 and '"done":' in text:
        streamed = e["streamed"] = True
    if status >= 400:
        e["finish"] = "error"
        return e, tags
    per_choice = collections.Counter()
    finishes, usage, err = {}, None, False
    choices_seen = set()
    if api in ("chat", "completions", "embeddings"):
        for o in documents(text, streamed, tags):
            if o.get("error"):
                err = True  # an error event, or OpenRouter's error member on a chunk
            for ch in o.get("choices") or []:
                if not isinstance(ch, dict):
                    continue
                i = ch.get("index", 0)
                choices_seen.add(i)
                part = ch.get("delta") if streamed and api == "chat" else ch
                if streamed and has_content(api, part):
                    per_choice[i] += 1
                if ch.get("finish_reason") is not None:
                    finishes[i] = finish_of(ch["finish_reason"])
            if isinstance(o.get("usage"), dict):
                usage = o["usage"]
        if api == "embeddings":
            e["finish"] = "stop"
        elif err:
            e["finish"] = "error"
        elif choices_seen and all(i in finishes for i in choices_seen):
            e["finish"] = worst(list(finishes.values()))
        else:
            # Complete without a finish reason for each choice: the server
            # ended it normally (stop, or the worst reason it did send);
            # cut short: an error.
            tags.append("no_finish_reason")
            e["finish"] = worst(list(finishes.values()) or ["stop"]) if complete(text, streamed) else "error"
        if len(choices_seen) > 1:
            tags.append("several_choices_streamed" if streamed else "several_choices")
        if usage is not None and count(usage.get("prompt_tokens")) is not None:
            e["prompt_tokens"] = count(usage["prompt_tokens"])
            gen = count(usage.get("completion_tokens"))
            if gen is None:
                gen = 0
                if api != "embeddings":
                    tags.append("usage_without_completion_tokens")
            e["generation_tokens"] = gen
            cached_of(e, usage, "prompt_tokens_details", tags)
    elif api == "responses":
        final, err = None, False
        if streamed:
            for o in documents(text, streamed, tags):
                t = o.get("type", "")
                if t == "error":
                    err = True
                if isinstance(t, str) and t.endswith(".delta") and isinstance(o.get("delta"), str) and o["delta"]:
                    per_choice[0] += 1
                if t in ("response.completed", "response.incomplete", "response.failed", "response.cancelled") \
                        and isinstance(o.get("response"), dict):
                    final = o["response"]
        else:
            final = next(documents(text, False, tags), None)
        st = final.get("status") if isinstance(final, dict) else None
        if err or st == "failed":
            e["finish"] = "error"
        elif st == "completed":
            e["finish"] = "stop"
        elif st == "incomplete":
            why = (final.get("incomplete_details") or {}).get("reason")
            e["finish"] = "stop" if why == "content_filter" else "length"
        elif st == "cancelled":
            e["finish"] = "abort"
        else:
            # A response with another status (queued, in_progress: a
            # background response) ended normally; a stream without its
            # final event was cut.
            tags.append("no_finish_reason")
            e["finish"] = "stop" if final is not None else "error"
        u = final.get("usage") if isinstance(final, dict) else None
        if isinstance(u, dict) and count(u.get("input_tokens")) is not None:
            e["prompt_tokens"] = count(u["input_tokens"])
            e["generation_tokens"] = count(u.get("output_tokens")) or 0
            cached_of(e, u, "input_tokens_details", tags)
    elif api == "messages":
        merged, stop, err = {}, None, False
        for o in documents(text, streamed, tags):
            t = o.get("type")
            if t == "error":
                err = True
            msg = o.get("message") if t == "message_start" else o
            if isinstance(msg, dict) and isinstance(msg.get("usage"), dict):
                for k, v in msg["usage"].items():
                    merged[k] = v
            if t == "message_delta" and isinstance(o.get("delta"), dict) and o["delta"].get("stop_reason"):
                stop = o["delta"]["stop_reason"]
            if t == "message" and o.get("stop_reason"):
                stop = o["stop_reason"]
            if t == "content_block_delta" and isinstance(o.get("delta"), dict):
                dl = o["delta"]
                if any(isinstance(dl.get(k), str) and dl.get(k) for k in ("text", "thinking", "partial_json")):
                    per_choice[0] += 1
        if err:
            e["finish"] = "error"
        elif stop is None:
            tags.append("no_finish_reason")
            e["finish"] = "stop" if complete(text, streamed, "message_stop") else "error"
        else:
            e["finish"] = finish_of(stop)
        if count(merged.get("input_tokens")) is not None:
            cr = count(merged.get("cache_read_input_tokens"))
            cc = count(merged.get("cache_creation_input_tokens"))
            e["prompt_tokens"] = count(merged["input_tokens"]) + (cr or 0) + (cc or 0)
            e["generation_tokens"] = count(merged.get("output_tokens")) or 0
            e["cached_tokens"] = cr
    elif api.startswith("ollama"):
        done = None
        for o in documents(text, streamed, tags, lines=True):
            if o.get("error"):
                err = True
            m = o.get("message") or {}
            if streamed and (any(isinstance(x, str) and x for x in (m.get("content"), m.get("thinking"), o.get("response"), o.get("thinking"))) or m.get("tool_calls")):
                per_choice[0] += 1
            if o.get("done"):
                done = o
        if err or done is None:
            e["finish"] = "error"
        else:
            e["finish"] = finish_of(done.get("done_reason") or "stop")
            if count(done.get("prompt_eval_count")) is not None:
                e["prompt_tokens"] = count(done["prompt_eval_count"])
                e["generation_tokens"] = count(done.get("eval_count")) or 0
    e["chunks_per_choice"] = [per_choice[i] for i in sorted(per_choice)]
    e["content_chunks"] = sum(per_choice.values())
    return e, sorted(set(tags))


def has_content(api, part):
    if not isinstance(part, dict):
        return False
    keys = ("text",) if api == "completions" else ("content", "reasoning_content", "reasoning", "refusal")
    if any(isinstance(part.get(k), str) and part.get(k) for k in keys):
        return True
    return api == "chat" and (bool(part.get("tool_calls")) or bool(part.get("function_call")))


# ---- writing an entry

def gzip_bytes(data, pieces):
    """data gzip-compressed, flushed at each piece's end as a streaming server
    does (a sync flush); returns the bytes and the compressed piece sizes."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    out, sizes = [], []
    for p in pieces:
        b = c.compress(p) + c.flush(zlib.Z_SYNC_FLUSH)
        out.append(b)
        sizes.append(len(b))
    tail = c.flush()
    out.append(tail)
    sizes[-1] += len(tail)
    return b"".join(out), sizes


def pieces_of(body, streamed):
    """The writes of a realistic server: one per SSE event (up to its blank
    line) or NDJSON line, the whole body when not streamed."""
    if not streamed:
        return [body]
    parts = re.split(rb"(?<=\r\n\r\n)|(?<=\n\n)(?<!\r\n\r\n)|(?<=\r\r)", body)
    if len(parts) == 1:
        parts = re.split(rb"(?<=\n)", body)
    return [p for p in parts if p]


def build_entry(n, rec, out_dir):
    seed = f"{rec['source']['repo']}@{rec['source']['commit']}:{rec['source']['path']}#{rec['source']['interaction']}"
    rw = Rewriter(seed)
    text = rec["resp_body"].decode("utf-8", "surrogateescape")
    new_text = rw.body(text)
    body = new_text.encode("utf-8", "surrogateescape")
    assert len(body) == len(rec["resp_body"]), rec["source"]
    req_text = rec["req_body"].decode("utf-8", "surrogateescape")
    rw.shorten = True
    new_req = rw.body(req_text).encode("utf-8", "surrogateescape")
    assert rw.shortened or len(new_req) == len(rec["req_body"]), rec["source"]
    exp, tags = expected(rec, new_text)
    exp_orig, _ = expected(rec, text)
    assert exp == exp_orig, (rec["source"], exp, exp_orig)  # the rewrite kept every figure
    if rec["req_body"].startswith(b"\xef\xbb\xbf"):
        tags.append("request_bom")
    if re.search(r"data:[^\r\n]*\r\ndata:", text):
        tags.append("data_lines_crlf")
    try:
        req = json.loads(new_req.decode("utf-8-sig"))
    except Exception:
        req = None
        tags.append("request_not_json")
    req = req if isinstance(req, dict) else {}
    usage_asked = isinstance(req.get("stream_options"), dict) and req["stream_options"].get("include_usage") is True
    pieces = pieces_of(body, exp["streamed"])
    enc = rec["encoding"]
    wire, wire_pieces = body, [len(p) for p in pieces]
    if enc in ("gzip", "x-gzip"):
        wire, wire_pieces = gzip_bytes(body, pieces)
    elif enc == "deflate":
        c = zlib.compressobj(6, zlib.DEFLATED, 15)
        wire = c.compress(body) + c.flush()
        wire_pieces = [len(wire)]
    ext = ".sse" if is_sse(rec["resp_headers"].get("content-type", ""), new_text) else ".json"
    if exp["streamed"] and ext == ".json":
        ext = ".ndjson"
    if not exp["streamed"] and not new_text.lstrip().startswith(("{", "[")):
        ext = ".txt"
    name = f"{n:04d}_{rec['provider']}_{rec['api']}"
    resp_file = name + ext + (".gz" if enc in ("gzip", "x-gzip") else ".zz" if enc == "deflate" else "")
    with open(os.path.join(out_dir, resp_file), "wb") as f:
        f.write(wire)
    req_file = name + ".req"
    with open(os.path.join(out_dir, req_file), "wb") as f:
        f.write(new_req)
    model = model_span(new_req)
    observed = is_observed(rec["path"])
    notes = list(rec["notes"])
    if rw.shortened:
        notes.append(f"{rw.shortened} file(s) embedded in the request shortened to {MAX_DATA} characters")
        tags.append("request_shortened")
    if rec["duplicates"]:
        notes.append("also recorded in " + ", ".join(rec["duplicates"]))
    if not observed:
        notes.append("path that ends in none of the package's: passed through, not recorded")
    keep_req = {k: rec["req_headers"][k] for k in ("content-type", "accept", "accept-encoding") if k in rec["req_headers"]}
    keep_resp = {k: rec["resp_headers"][k] for k in ("content-type", "content-encoding", "content-length", "transfer-encoding")
                 if k in rec["resp_headers"]}
    return {
        "id": name,
        "source": rec["source"],
        "provider": rec["provider"],
        "host": rec["host"],
        "api": rec["api"],
        "method": "POST",
        "path": rec["path"] + rec["query"],
        "observed": observed,
        "request_file": "bodies/" + req_file,
        "request_headers": keep_req,
        "model": model,
        "stream_asked": req.get("stream") is True,
        "usage_asked": usage_asked,
        "n": count(req.get("n")),
        "response_file": "bodies/" + resp_file,
        "status": rec["status"],
        "response_headers": keep_resp,
        "encoding": "gzip" if enc in ("gzip", "x-gzip") else enc or "identity",
        "pieces": wire_pieces,
        "streamed": exp["streamed"],
        "expect": {k: exp[k] for k in ("finish", "prompt_tokens", "generation_tokens", "cached_tokens",
                                       "content_chunks", "chunks_per_choice")},
        "tags": sorted(set(tags)),
        "notes": notes,
    }


def is_observed(path):
    """Whether the path's segments (doubled and trailing slashes aside) end
    in the segments of one of OBSERVED."""
    segs = [s for s in path.split("/") if s]
    return any(segs[len(segs) - len(e):] == e for e in (o.strip("/").split("/") for o in OBSERVED)
               if len(segs) >= len(e))


def model_span(req):
    """The byte offsets of the request's top-level model string value, for a
    test that gives each entry a model of its own."""
    text = req.decode("utf-8", "surrogateescape")
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if depth == 1 and text[i:j + 1] == '"model"':
                m = re.match(r'\s*:\s*"((?:[^"\\]|\\.)*)"', text[j + 1:])
                if m:
                    start = len(text[:j + 1 + m.start(1)].encode("utf-8", "surrogateescape"))
                    return [start, start + len(m.group(1).encode("utf-8", "surrogateescape"))]
            i = j + 1
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        i += 1
    return None


def print_counts(manifest):
    """Prints the counts table of README.md: recordings per provider and API,
    streamed, gzip-encoded and 4xx."""
    apis = ["chat", "completions", "embeddings", "responses", "messages"]
    cols = apis + ["all", "streamed", "gzip", "4xx"]
    rows = collections.defaultdict(collections.Counter)
    for m in manifest:
        for r in (m["provider"], "**all**"):
            c = rows[r]
            c[m["api"]] += 1
            c["all"] += 1
            c["streamed"] += m["streamed"]
            c["gzip"] += m["encoding"] == "gzip"
            c["4xx"] += 400 <= m["status"] < 500
    print("| provider | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for r in sorted(rows, key=lambda r: (r == "**all**", -rows[r]["all"], r)):
        print(f"| {r} | " + " | ".join(str(rows[r][c] or "") for c in cols) + " |")


if __name__ == "__main__":
    main()
