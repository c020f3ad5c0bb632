#!/usr/bin/env python3
"""vLLM's own recording path, timed for scripts/bench.sh.

Records the decode step of internal/benchvariants.DecodeStep (a batch of 256
running requests: 4 first tokens, 256 inter-token latencies, 4 finished
requests) the way vLLM v1's PrometheusStatLogger.record does it: Python's
prometheus_client, children bound to (model_name, engine) once at start-up,
one observe or inc per value. Also times one pre-bound histogram observe.
Prints Go benchmark lines (BenchmarkIteration/vllm_prometheus_client, ...)
so that bench.sh and benchstat read them beside the Go variants.

Usage: bench_vllm.py [-count N] [-seconds S]
"""

import os
import sys
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BATCH, NEW, FINISHING = 256, 4, 4

# vLLM's buckets (vllm/v1/metrics/loggers.py; instrument/buckets.go has the same).
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
        1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
       1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
           30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]  # 1-2-5 up to max_model_len 8192
ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
N_BUCKETS = [1, 2, 5, 10, 20]
PREEMPTIONS = [1, 2, 3, 4, 5, 10, 20]


class Engine:
    """The families vLLM records per step, children bound once."""

    def __init__(self, reg, engine="0"):
        lbl = ("model_name", "engine")
        v = (MODEL, engine)

        def counter(name, extra=()):
            return Counter(name, name, lbl + extra, registry=reg)

        def hist(name, buckets):
            return Histogram(name, name, lbl, buckets=buckets, registry=reg).labels(*v)

        def gauge(name):
            return Gauge(name, name, lbl, registry=reg).labels(*v)

        self.running, self.waiting, self.kv = gauge("vllm:num_requests_running"), gauge(
            "vllm:num_requests_waiting"), gauge("vllm:kv_cache_usage_perc")
        src = counter("vllm:prompt_tokens_by_source", ("source",))
        self.by_source = [src.labels(*v, s) for s in ("local_compute", "local_cache_hit", "external_kv_transfer")]
        self.prompt = counter("vllm:prompt_tokens").labels(*v)
        self.cached = counter("vllm:prompt_tokens_cached").labels(*v)
        self.generation = counter("vllm:generation_tokens").labels(*v)
        self.preempted = counter("vllm:num_preemptions").labels(*v)
        success = counter("vllm:request_success", ("finished_reason",))
        self.success = {r: success.labels(*v, r) for r in ("stop", "length", "abort", "error", "repetition")}
        self.iteration = hist("vllm:iteration_tokens_total", ITERATION)
        self.ttft = hist("vllm:time_to_first_token_seconds", TTFT)
        self.itl = hist("vllm:inter_token_latency_seconds", ITL)
        self.e2e = hist("vllm:e2e_request_latency_seconds", LATENCY)
        self.queue = hist("vllm:request_queue_time_seconds", LATENCY)
        self.inference = hist("vllm:request_inference_time_seconds", LATENCY)
        self.prefill = hist("vllm:request_prefill_time_seconds", LATENCY)
        self.decode = hist("vllm:request_decode_time_seconds", LATENCY)
        self.tpot = hist("vllm:request_time_per_output_token_seconds", ITL)
        self.req_prompt = hist("vllm:request_prompt_tokens", TOKENS)
        self.req_gen = hist("vllm:request_generation_tokens", TOKENS)
        self.prefill_kv = hist("vllm:request_prefill_kv_computed_tokens", TOKENS)
        self.max_tokens = hist("vllm:request_params_max_tokens", TOKENS)
        self.params_n = hist("vllm:request_params_n", N_BUCKETS)
        self.max_gen = hist("vllm:request_max_num_generation_tokens", TOKENS)
        self.num_preempt = hist("vllm:request_num_preemptions", PREEMPTIONS)

    def record(self, step):
        """One step, as PrometheusStatLogger.record: scheduler gauges, then the iteration."""
        self.running.set(BATCH)
        self.waiting.set(15)
        self.kv.set(0.83)
        computed, local, external = step["prompt"]
        if computed:
            self.by_source[0].inc(computed)
        if local:
            self.by_source[1].inc(local)
        if external:
            self.by_source[2].inc(external)
        self.prompt.inc(computed + local + external)
        self.cached.inc(local + external)
        self.generation.inc(step["generation"])
        self.iteration.observe(computed + step["generation"])
        for v in step["ttft"]:
            self.ttft.observe(v)
        for v in step["itl"]:
            self.itl.observe(v)
        for f in step["finished"]:
            self.success[f["reason"]].inc()
            self.req_prompt.observe(f["prompt"])
            self.req_gen.observe(f["gen"])
            self.prefill_kv.observe(f["prompt"] // 3)
            self.max_tokens.observe(512)
            self.params_n.observe(1)
            self.max_gen.observe(f["gen"])
            self.e2e.observe(f["e2e"])
            self.tpot.observe(f["tpot"])
            self.queue.observe(f["queue"])
            self.inference.observe(f["inference"])
            self.prefill.observe(f["prefill"])
            self.decode.observe(f["decode"])
            self.num_preempt.observe(0)


def decode_step():
    """internal/benchvariants.DecodeStep, value for value."""
    finished = []
    for i, reason in enumerate(("stop", "length", "stop", "abort")):
        gen = 512 if reason == "length" else 64 + 96 * i
        decode = 0.02 * (gen - 1)
        finished.append({"reason": reason, "prompt": 300 + 700 * i, "gen": gen,
                         "queue": 0.05 + 0.1 * i, "prefill": 0.08 + 0.02 * i, "decode": decode,
                         "inference": 0.08 + 0.02 * i + decode, "e2e": 0.13 + 0.12 * i + decode,
                         "tpot": decode / (gen - 1)})
    return {"prompt": (812 + 1500 + 96, 200 + 500, 2048 + 4000), "generation": BATCH + NEW,
            "ttft": [0.045, 0.12, 0.31, 0.82], "itl": [0.008 + 0.00032 * i for i in range(BATCH)],
            "finished": finished}


def bench(name, fn, seconds):
    """Runs fn for about seconds and prints a Go benchmark line."""
    n = 1
    while True:  # calibrate like go test: grow n until a run takes long enough
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        took = time.perf_counter_ns() - t0
        if took >= seconds * 1e9 or n >= 1 << 30:
            break
        n = max(n * 2, int(n * seconds * 1e9 / max(took, 1) * 1.2))
    print(f"{name}-{os.cpu_count()} \t{n}\t{took / n:.1f} ns/op", flush=True)


def main(argv):
    count, seconds = 6, 1.0
    i = 0
    while i < len(argv):
        if argv[i] == "-count":
            count, i = int(argv[i + 1]), i + 2
        elif argv[i] == "-seconds":
            seconds, i = float(argv[i + 1]), i + 2
        else:
            sys.exit(f"bench_vllm.py: unknown argument {argv[i]}")
    e = Engine(CollectorRegistry())
    step = decode_step()
    itl = e.itl
    print(f"# python {sys.version.split()[0]}")
    for _ in range(count):
        bench("BenchmarkIteration/vllm_prometheus_client", lambda: e.record(step), seconds)
        bench("BenchmarkObserve/vllm_prometheus_client", lambda: itl.observe(0.042), seconds)


if __name__ == "__main__":
    main(sys.argv[1:])
