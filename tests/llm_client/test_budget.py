"""Where a budget comes from when none is configured: rate-limit headers, AIMD on bare 429s."""

from __future__ import annotations

import pytest

from llm_client._budget import Adaptive, LimitHints, read_limits


class TestReadLimits:
    def test_openai_headers(self) -> None:
        """x-ratelimit-limit-* give the per-minute limits, -remaining-* what is left."""
        headers = {
            "x-ratelimit-limit-requests": "600",
            "x-ratelimit-limit-tokens": "90000",
            "x-ratelimit-remaining-requests": "599",
            "x-ratelimit-remaining-tokens": "89900",
            "x-ratelimit-reset-requests": "100ms",
        }
        assert read_limits(headers) == LimitHints(600.0, 90000.0, 599.0, 89900.0)

    def test_anthropic_headers(self) -> None:
        """anthropic-ratelimit-*-limit and -remaining are read the same way."""
        headers = {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
            "anthropic-ratelimit-tokens-limit": "40000",
            "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:00Z",
        }
        assert read_limits(headers) == LimitHints(50.0, 40000.0, 49.0, None)

    @pytest.mark.parametrize(
        "headers",
        [
            {},
            {"retry-after": "1"},
            {"x-ratelimit-limit-requests": "lots"},
            {"x-ratelimit-limit-requests": "0"},
            {"x-ratelimit-limit-requests": "inf"},
        ],
    )
    def test_no_usable_limit_is_none(self, headers: dict[str, str]) -> None:
        """No limit header, an unreadable one, 0 or infinity: no limit stated."""
        assert read_limits(headers) is None


def _burst(adaptive: Adaptive, count: int, start: float, span: float) -> None:
    for i in range(count):
        adaptive.admitted(start + span * i / count)


class TestAdaptive:
    def test_first_refusal_cuts_from_the_measured_rate(self) -> None:
        """The first bare 429 sets the rate to BETA times the rate measured lately."""
        adaptive = Adaptive()
        _burst(adaptive, 100, 0.0, 1.0)
        assert adaptive.refused(1.0) == Adaptive.PAUSE_BASE
        assert adaptive.rate == pytest.approx(Adaptive.BETA * 100, rel=0.02)
        assert adaptive.in_episode

    def test_refused_probes_lengthen_the_pause_without_cutting_again(self) -> None:
        """Each refused probe of one episode waits PAUSE_GROWTH times longer, up to the
        cap, and the rate is cut once per episode."""
        adaptive = Adaptive()
        _burst(adaptive, 100, 0.0, 1.0)
        pauses = [adaptive.refused(1.0 + i) for i in range(12)]
        assert pauses[:3] == pytest.approx(
            [Adaptive.PAUSE_BASE * Adaptive.PAUSE_GROWTH**i for i in range(3)]
        )
        assert pauses == sorted(pauses) and pauses[-1] == Adaptive.PAUSE_CAP
        assert adaptive.rate == pytest.approx(Adaptive.BETA * 100, rel=0.02)

    def test_recovery_resumes_at_the_goodput_of_the_window(self) -> None:
        """A window of 300 requests sent in one second, refused until it reopened after
        ten: the rate resumes near 300 per 10 s, not at the burst's rate."""
        adaptive = Adaptive()
        _burst(adaptive, 300, 0.0, 1.0)
        adaptive.refused(1.0)
        adaptive.refused(9.0)
        adaptive.recovered(11.0)  # reopened between 9 and 11: taken as 10
        assert not adaptive.in_episode
        assert adaptive.rate == pytest.approx(30.0, rel=0.02)

    def test_rate_grows_only_while_callers_wait(self) -> None:
        """Additive increase: GROWTH of the recovered rate per second, only while hungry."""
        adaptive = Adaptive()
        _burst(adaptive, 300, 0.0, 1.0)
        adaptive.refused(1.0)
        adaptive.recovered(11.0)
        start = adaptive.rate
        assert start is not None
        adaptive.grow(12.0, hungry=False)
        assert adaptive.rate == start
        adaptive.grow(14.0, hungry=True)
        assert adaptive.rate == pytest.approx(start * (1 + 2 * Adaptive.GROWTH))

    def test_a_second_episode_cuts_the_rate_in_force(self) -> None:
        """Once a rate is in force, a new episode cuts that rate, not a measured one."""
        adaptive = Adaptive()
        _burst(adaptive, 300, 0.0, 1.0)
        adaptive.refused(1.0)
        adaptive.recovered(11.0)
        in_force = adaptive.rate
        assert in_force is not None
        adaptive.refused(20.0)
        assert adaptive.rate == pytest.approx(Adaptive.BETA * in_force)
