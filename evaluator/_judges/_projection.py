"""``--project N``: what judging N examples would cost each judge, and how long it would take.

Cost: the measured cost per call times N (one call per example; unknown when the
measured cost is). Time: N over the judge's throughput, the tightest of three limits:

* concurrency: calls in flight (the smaller of the model's ``max_concurrency`` and the
  engine's parallelism for the metric) over the mean *service* time of a call (its
  latency minus the time it waited on the rate governor, so that a run already slowed by
  rpm does not count the slowdown twice);
* rpm: the model's requests per minute, paced below the limit by its ``rate_margin`` as
  the governor does, over the model calls one example makes;
* tpm: its tokens per minute, likewise, over the tokens one example uses.

plus one service time for the last call. These are the limits the run is *configured*
with; a provider's own limits, unknown here, may bind first. The projection says so.
"""

from __future__ import annotations

import math

from ._report import JudgeRow, Projection

__all__ = ["project"]


def project(
    row: JudgeRow,
    examples: int,
    *,
    rpm: float | None,
    tpm: float | None,
    rate_margin: float,
) -> Projection:
    """The projection for ``row`` (its measured figures) at the configured limits."""
    out = Projection(examples=examples)
    if row.cost_usd is not None and row.cost_per_1k_usd is not None:
        out.cost_usd = row.cost_per_1k_usd / 1000 * examples
    service = row.service_ms_mean
    if service is None or row.concurrency is None:
        out.note = "no call succeeded: nothing to project from"
        if row.cost_usd is None:
            out.note += f"; cost unknown: {row.cost_note}"
        return out
    pace = 1.0 - rate_margin
    limits: dict[str, float] = {"concurrency": row.concurrency / max(service, 1e-3) * 60_000}
    calls = row.calls_per_example or 1.0
    tokens = (row.input_tokens_per_example or 0.0) + (row.output_tokens_per_example or 0.0)
    if rpm is not None:
        limits["rpm"] = rpm * pace / calls
    if tpm is not None and tokens > 0:
        limits["tpm"] = tpm * pace / tokens
    binding = min(limits, key=lambda k: limits[k])
    out.per_minute = limits[binding]
    out.limited_by = binding
    out.wall_s = examples / out.per_minute * 60 + service / 1000
    parts = [f"{row.concurrency} in flight x {service:.0f} ms per call"]
    if rpm is not None:
        parts.append(f"rpm {rpm:g}")
    if tpm is not None:
        parts.append(f"tpm {tpm:g} at {tokens:.0f} tokens/example")
    out.basis = "measured cost per call; " + ", ".join(parts) + " (configured limits)"
    if row.cost_usd is None:
        out.note = f"cost unknown: {row.cost_note}"
    if not math.isfinite(out.wall_s):
        out.wall_s = None
    return out
