"""``/metrics`` in four engine dialects, from one simulated engine's state.

Names, types and label sets follow the real captures in ``shared/fixtures/metrics``:
``vllm-v1`` as vLLM 0.10 prints it (labels ``engine``, ``model_name``; ``_created``
gauges; ``kv_cache_usage_perc`` and the deprecated ``gpu_cache_usage_perc``), ``vllm-v0``
as vLLM 0.6/0.7 (``model_name`` only; swap metrics; the ``avg_*_throughput`` gauges),
``llamacpp`` as llama-server (no labels, no KV usage: that is in ``GET /slots``),
``sglang`` as its production-metrics docs. Durations are virtual seconds; token rates are
per virtual second.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from sim.core import EngineCore, Seq, StepResult
from sim.promtext import Exposition, Histogram

DIALECTS = ("vllm-v1", "vllm-v0", "llamacpp", "sglang")

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SGL_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0,
            20.0, 25.0, 30.0)
SGL_E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
SGL_TPOT = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
            1.0, 2.5)
RATE_WINDOW = 5.0  # virtual seconds behind the throughput gauges (vLLM v0 logs every 5 s)


def _token_buckets(max_len: int) -> tuple[float, ...]:
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_len:
                return tuple(out)
            out.append(float(m * scale))
        scale *= 10


@dataclass(frozen=True)
class Override:
    """Values the ``contradictory`` metrics fault forces into the output."""

    running: float = -1.0
    kv_usage: float = 1.7


class Recorder:
    """Listens to an engine's steps and keeps what its /metrics reports."""

    def __init__(self, core: EngineCore, dialect: str) -> None:
        self.core = core
        self.dialect = dialect
        sgl = dialect == "sglang"
        self.ttft = Histogram(SGL_TTFT if sgl else TTFT_BUCKETS)
        self.tpot = Histogram(SGL_TPOT if sgl else TPOT_BUCKETS)
        self.e2e = Histogram(SGL_E2E if sgl else LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.prefill = Histogram(LATENCY_BUCKETS)
        self.decode = Histogram(LATENCY_BUCKETS)
        self.iteration = Histogram(ITERATION_BUCKETS)
        token_buckets = _token_buckets(core.profile.max_model_len)
        self.prompt_len = Histogram(token_buckets)
        self.gen_len = Histogram(token_buckets)
        self.func_latency = Histogram((0.05, 0.075, 0.1125, 0.16875, 0.253125))
        self._last_token: dict[str, float] = {}
        self._samples: deque[tuple[float, int, int]] = deque()
        self.busy_slot_sum = 0
        self.decode_calls = 0
        self.created = time.time()
        self._llama_last = (0, 0.0, 0, 0.0)  # prompt tokens, prompt s, predicted, predicted s at last scrape
        # llama-server adds a request's generated tokens and time when its slot is released
        # (also on a cancel), so these two counters jump when requests end
        self._live_predicted: dict[str, tuple[int, Seq, float]] = {}  # rid -> tokens, sequence, last token at
        self.predicted_done = 0
        self.predicted_seconds_done = 0.0

    def _predicted(self, result: StepResult) -> None:
        for seq, n in result.tokens:
            tokens, _, _ = self._live_predicted.get(seq.rid, (0, seq, 0.0))
            self._live_predicted[seq.rid] = (tokens + n, seq, result.end)
        for seq in result.finished:
            self._end_predicted(seq.rid)

    def _end_predicted(self, rid: str) -> None:
        # a slot's generation time runs from its first token to its end, overlapping other slots'
        tokens, seq, last = self._live_predicted.pop(rid)
        end = seq.finished_at if seq.finished_at is not None else last
        self.predicted_done += tokens
        self.predicted_seconds_done += max(0.0, end - (seq.first_token if seq.first_token is not None else end))

    def settle(self) -> None:
        """Count the generation of requests that ended outside a step (aborted by their client)."""
        for rid in [r for r in self._live_predicted if r not in self.core.seqs]:
            self._end_predicted(rid)

    def on_step(self, result: StepResult) -> None:
        """Observe one step's results."""
        if self.dialect == "llamacpp":
            self._predicted(result)
        self.iteration.observe(result.prefill_tokens + result.decode_tokens)
        self.busy_slot_sum += result.batch
        self.decode_calls += result.steps
        for seq, n in result.tokens:
            last = self._last_token.get(seq.rid)
            if last is None:
                if seq.first_token is not None:
                    self.ttft.observe(seq.first_token - seq.arrival)
            elif n:
                gap = (result.end - last) / n
                for _ in range(n):
                    self.tpot.observe(gap)
            self._last_token[seq.rid] = result.end
        for seq in result.finished:
            self._last_token.pop(seq.rid, None)
            if seq.finished_at is None:
                continue
            self.e2e.observe(seq.finished_at - seq.arrival)
            self.prompt_len.observe(seq.req.context_tokens)
            self.gen_len.observe(seq.generated)
            self.func_latency.observe(0.001)
            if seq.first_scheduled is not None:
                self.queue.observe(seq.first_scheduled - seq.arrival)
                if seq.first_token is not None:
                    self.prefill.observe(seq.first_token - seq.first_scheduled)
                    self.decode.observe(seq.finished_at - seq.first_token)
        now = result.end
        if not self._samples or now - self._samples[-1][0] >= 0.5:
            c = self.core.counters
            self._samples.append((now, c.prompt_tokens, c.generation_tokens))
            while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW:
                self._samples.popleft()

    def rates(self, now: float) -> tuple[float, float]:
        """(prompt, generation) tokens per second over the last few virtual seconds."""
        c = self.core.counters
        if not self._samples:
            return 0.0, 0.0
        t0, p0, g0 = self._samples[0]
        span = max(now - t0, 1e-9)
        if now - t0 > 2 * RATE_WINDOW:
            return 0.0, 0.0  # idle for a while
        return (c.prompt_tokens - p0) / span, (c.generation_tokens - g0) / span

    def render(self, model: str, now: float, override: Override | None = None) -> str:
        """The /metrics text of this engine in its dialect."""
        if self.dialect == "llamacpp":
            return self._llamacpp(override)
        if self.dialect == "sglang":
            return self._sglang(model, now, override)
        return self._vllm(model, now, override, v1=self.dialect != "vllm-v0")

    # -- dialects ----------------------------------------------------------------
    def _vllm(self, model: str, now: float, o: Override | None, *, v1: bool) -> str:
        core, c = self.core, self.core.counters
        lab = {"engine": "0", "model_name": model} if v1 else {"model_name": model}
        ex = Exposition(created=self.created if v1 else None)
        running = o.running if o else core.num_running
        usage = o.kv_usage if o else core.kv_usage
        p = core.profile
        info = {"block_size": str(p.block_size), "cache_dtype": "auto", "calculate_kv_scales": "False",
                "cpu_offload_gb": "0", "enable_prefix_caching": "False", "gpu_memory_utilization": "0.9",
                "is_attention_free": "False", "num_cpu_blocks": str(core.total_swap),
                "num_gpu_blocks": str(core.total_blocks), "num_gpu_blocks_override": "None",
                "sliding_window": "None", "swap_space_bytes": str(int(p.swap_bytes))}
        if v1:
            info = {"engine": "0", **info}
        ex.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [(info, 1.0)])
        running_help = "Number of requests in model execution batches." if v1 else "Number of requests currently running on GPU."
        ex.gauge("vllm:num_requests_running", running_help, [(lab, running)])
        if not v1:
            ex.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", [(lab, core.num_swapped)])
        ex.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", [(lab, core.num_waiting)])
        if v1:
            ex.gauge("vllm:gpu_cache_usage_perc",
                     "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                     [(lab, usage)])
            ex.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", [(lab, usage)])
        else:
            ex.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", [(lab, usage)])
            ex.gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.",
                     [(lab, core.swap_usage)])
            ex.gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", [(lab, -1.0)])
            ex.gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", [(lab, -1.0)])
            prompt_rate, gen_rate = self.rates(now)
            ex.gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.",
                     [(lab, prompt_rate)])
            ex.gauge("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.",
                     [(lab, gen_rate)])
        if not v1:
            ex.gauge("vllm:lora_requests_info", "Running stats on lora requests.",
                     [({"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""}, self.created)])
        ex.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
                   [(lab, c.preemptions)])
        if v1:
            # every prompt token was either found in the prefix cache or computed
            hits = c.prefix_cache_hit_tokens
            queries = c.prompt_tokens + hits
            ex.counter("vllm:gpu_prefix_cache_queries_total",
                       "GPU prefix cache queries, in terms of number of queried tokens. "
                       "DEPRECATED: Use vllm:prefix_cache_queries instead.", [(lab, queries)])
            ex.counter("vllm:gpu_prefix_cache_hits_total",
                       "GPU prefix cache hits, in terms of number of cached tokens. "
                       "DEPRECATED: Use vllm:prefix_cache_hits instead.", [(lab, hits)])
            ex.counter("vllm:prefix_cache_queries_total",
                       "Prefix cache queries, in terms of number of queried tokens.", [(lab, queries)])
            ex.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
                       [(lab, hits)])
        ex.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(lab, c.prompt_tokens)])
        ex.counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
                   [(lab, c.generation_tokens)])
        reasons = ["stop", "length", "abort", *sorted(set(c.finished) - {"stop", "length", "abort"})]
        ex.counter("vllm:request_success_total", "Count of successfully processed requests.",
                   [({"finished_reason": r, **lab}, c.finished.get(r, 0)) for r in reasons])
        ex.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                     [(lab, self.iteration)])
        ex.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     [(lab, self.ttft)])
        ex.histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                     [(lab, self.tpot)])
        ex.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                     [(lab, self.e2e)])
        ex.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", [(lab, self.prompt_len)])
        ex.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                     [(lab, self.gen_len)])
        if v1:
            ex.histogram("vllm:request_queue_time_seconds",
                         "Histogram of time spent in WAITING phase for request.", [(lab, self.queue)])
            ex.histogram("vllm:request_prefill_time_seconds",
                         "Histogram of time spent in PREFILL phase for request.", [(lab, self.prefill)])
            ex.histogram("vllm:request_decode_time_seconds",
                         "Histogram of time spent in DECODE phase for request.", [(lab, self.decode)])
        return ex.text()

    def _llamacpp(self, o: Override | None) -> str:
        core, c = self.core, self.core.counters
        ex = Exposition(llama=True)
        self.settle()
        predicted, predicted_s = self.predicted_done, self.predicted_seconds_done
        last_p, last_ps, last_g, last_gs = self._llama_last
        # llama-server averages these two gauges over the window since the previous scrape
        prompt_rate = (c.prompt_tokens - last_p) / (c.prefill_time - last_ps) if c.prefill_time > last_ps else 0.0
        gen_rate = (predicted - last_g) / (predicted_s - last_gs) if predicted_s > last_gs else 0.0
        self._llama_last = (c.prompt_tokens, c.prefill_time, predicted, predicted_s)
        busy = self.busy_slot_sum / self.decode_calls if self.decode_calls else 0.0
        ex.counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
                   [({}, c.prompt_tokens)])
        ex.counter("llamacpp:prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
                   [({}, c.cached_prompt_tokens)])
        ex.counter("llamacpp:prompt_seconds_total", "Total time spent processing prompts", [({}, round(c.prefill_time, 6))])
        ex.counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed",
                   [({}, predicted)])
        ex.counter("llamacpp:tokens_predicted_seconds_total", "Total time spent generating tokens",
                   [({}, round(predicted_s, 6))])
        ex.counter("llamacpp:n_decode_total",
                   "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
                   [({}, c.steps)])
        ex.counter("llamacpp:n_tokens_max", "Largest observed sequence length (prompt + generation)",
                   [({}, c.max_seq_tokens)])
        ex.counter("llamacpp:spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", [({}, 0)])
        ex.counter("llamacpp:spec_decode_num_accepted_tokens_total",
                   "Speculative: Total draft tokens accepted by the target model", [({}, 0)])
        ex.counter("llamacpp:spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
                   [({}, 0)])
        ex.gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s", [({}, round(prompt_rate, 2))])
        ex.gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s",
                 [({}, round(gen_rate, 4))])
        # llama-server gives a request a slot the moment one is free (its prompt is then
        # "processing"); only requests beyond the slots are deferred. The core may hold a
        # request waiting for its next step while slots are free: that one is processing.
        holding = core.num_running + core.num_waiting
        processing = min(core.max_num_seqs, holding)
        ex.gauge("llamacpp:requests_processing", "Number of requests processing",
                 [({}, o.running if o else processing)])
        ex.gauge("llamacpp:requests_deferred", "Number of requests deferred",
                 [({}, max(0, holding - core.max_num_seqs))])
        ex.gauge("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
                 [({}, round(busy, 4))])
        return ex.text()

    def _sglang(self, model: str, now: float, o: Override | None) -> str:
        core, c = self.core, self.core.counters
        lab = {"model_name": model}
        ex = Exposition()
        _, gen_rate = self.rates(now)
        ex.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", [(lab, c.prompt_tokens)])
        ex.counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                   [(lab, c.generation_tokens)])
        ex.gauge("sglang:token_usage", "The token usage", [(lab, o.kv_usage if o else round(core.kv_usage, 2))])
        ex.gauge("sglang:cache_hit_rate", "The cache hit rate", [(lab, 0.0)])
        ex.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     [(lab, self.ttft)])
        ex.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                     [(lab, self.e2e)])
        ex.histogram("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                     [(lab, self.tpot)])
        ex.histogram("sglang:func_latency_seconds", "Function latency in seconds",
                     [({"name": "generate_request"}, self.func_latency)])
        ex.gauge("sglang:num_running_reqs", "The number of running requests", [(lab, o.running if o else core.num_running)])
        ex.gauge("sglang:num_used_tokens", "The number of used tokens", [(lab, core.used_tokens)])
        ex.gauge("sglang:gen_throughput", "The generate throughput (token/s)", [(lab, gen_rate)])
        ex.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue", [(lab, core.num_waiting)])
        return ex.text()
