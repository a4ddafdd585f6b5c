"""The stand-in's periodic "SpecDecoding metrics: ..." log line, as vLLM 0.25.1 writes it.

vLLM's API server calls do_log_stats() every VLLM_LOG_STATS_INTERVAL seconds
(default 10; a value <= 0 means 10), and its LoggingStatLogger logs, at INFO
when the engine was not idle, SpecDecodingLogging.log() (v1/spec_decode/
metrics.py): the drafts since the last line, then resets. Compared with the
real SpecDecodingLogging by tests/conformance/test_vllm_ray_executor.py.
"""

from __future__ import annotations

import os
import threading
import time


def log_stats_interval(environ=None):
    """vllm.envs.VLLM_LOG_STATS_INTERVAL."""
    environ = os.environ if environ is None else environ
    value = float(environ.get("VLLM_LOG_STATS_INTERVAL", "10."))
    return value if value > 0.0 else 10.0


class SpecDecodingLogging:
    """Drafts observed since the last log line, and the line."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = []
        self.last_log_time = self.clock()

    def observe(self, num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos):
        """One engine step's SpecDecodingStats: accepted_per_pos[i] drafts accepted position i."""
        with self.lock:
            self.num_drafts += num_drafts
            self.num_draft_tokens += num_draft_tokens
            self.num_accepted_tokens += num_accepted_tokens
            if len(self.accepted_per_pos) < len(accepted_per_pos):
                self.accepted_per_pos += [0] * (len(accepted_per_pos) - len(self.accepted_per_pos))
            for pos, count in enumerate(accepted_per_pos):
                self.accepted_per_pos[pos] += count

    def message(self):
        """The line's message for the drafts since the last one, and a reset; None without drafts."""
        with self.lock:
            if not self.num_drafts:
                return None
            elapsed_time = self.clock() - self.last_log_time
            draft_throughput = accepted_throughput = 0
            if elapsed_time > 0:
                draft_throughput = self.num_draft_tokens / elapsed_time
                accepted_throughput = self.num_accepted_tokens / elapsed_time
            draft_acceptance_rate = (self.num_accepted_tokens / self.num_draft_tokens * 100
                                     if self.num_draft_tokens > 0 else float("nan"))
            mean_acceptance_length = 1 + (self.num_accepted_tokens / self.num_drafts)
            rates_str = ", ".join(f"{count / self.num_drafts:.3f}" for count in self.accepted_per_pos)
            text = ("SpecDecoding metrics: "
                    "Mean acceptance length: %.2f, "
                    "Accepted throughput: %.2f tokens/s, "
                    "Drafted throughput: %.2f tokens/s, "
                    "Accepted: %d tokens, "
                    "Drafted: %d tokens, "
                    "Per-position acceptance rate: %s, "
                    "Avg Draft acceptance rate: %.1f%%") % (
                mean_acceptance_length, accepted_throughput, draft_throughput, self.num_accepted_tokens,
                self.num_draft_tokens, rates_str, draft_acceptance_rate)
            self.reset()
            return text
