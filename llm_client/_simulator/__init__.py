"""A local OpenAI-compatible server for tests, benchmarks and examples (127.0.0.1 only).

``POST /v1/chat/completions`` and ``POST /v1/responses`` (plain or streamed) answer
deterministically with real ``usage``; ``GET /v1/models`` lists the configured models;
``GET /sim/statistics?window=W`` returns what it saw as JSON (for a simulator in another
process).

Replies (``_replies.py``; deterministic, so judge metrics give repeatable verdicts):

* a *judge prompt* is one where any message contains "PASS or FAIL" (any case). The
  true verdict: if the last user message has a line ``Answer: X`` and a line
  ``Expected: Y``, PASS iff X and Y match after strip, ignoring case; otherwise PASS iff a
  stable hash of the user message falls under ``pass_rate``. Each model then flips the
  verdict with its own ``noise`` probability, decided by a stable hash of (model, user
  message), so a noisy model is wrong on the same examples every run. The reply is
  ``"PASS. <one sentence>"`` or ``"FAIL. <one sentence>"``.
* any other prompt gets ``"Echo: "`` and the last user message with whitespace collapsed,
  cut to 200 characters (and to ``max_tokens * 4`` characters, finish reason "length").

Usage: ``prompt_tokens`` by :func:`~llm_client._wire.estimate_tokens` (about 4 characters
a token, 4 per message, 3 for priming), ``completion_tokens`` the reply's length / 4 plus
the model's ``reasoning_tokens``; a system message seen before is reported as cached.

A request body may carry ``"sim_latency_ms"`` (through the client's ``extra_body``) to
script the latency of that one call.

Limits (``_limits.py``): ``rpm``/``tpm`` are enforced over a sliding window of
``window_s`` seconds (at most ``rpm * window_s / 60`` requests accepted in any such
window) and answered with 429, ``retry-after``, ``retry-after-ms`` and ``x-ratelimit-*``
headers. Faults (``_faults.py``) are drawn per request from one seeded generator, at the
configured rates. The server (``_server.py``) is a small HTTP/1.1 server of its own, so
that the simulator's CPU per request stays well under the client's it measures.
"""

from ._config import ModelSettings as ModelSettings
from ._config import SimulatorConfig as SimulatorConfig
from ._simulator import Simulator as Simulator
from ._simulator import SimulatorStatistics as SimulatorStatistics

__all__ = ["ModelSettings", "Simulator", "SimulatorConfig", "SimulatorStatistics"]
