"""SDK calls routed at the HTTP-client layer: the real openai, litellm and dspy packages,
real HTTP to the simulator, in every executor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evaluator import Evaluator
from llm_client import Simulator, SimulatorConfig
from tests._helpers import PROCESS, write

from .conftest import ACCEPT, OPENAI_ASYNC, OPENAI_SYNC, examples


class TestRoutedInEveryExecutor:
    @pytest.mark.parametrize("execution", ["thread", "inline", PROCESS])
    async def test_sync_openai_client_metered(self, tmp_path: Path, execution: str) -> None:
        """A sync openai program's calls (chat, streamed chat, Responses API) are served
        through the engine: every call the simulator served is in the observations, with
        the server's tokens, and the stream reaches the program whole, without the usage
        chunk it did not ask for."""
        program = write(tmp_path, "program.py", OPENAI_SYNC)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution=execution, timeout=60
            ) as ev,
        ):
            results = await ev.evaluate_many(sim.base_url, examples(4))
            sdk_calls = ev.statistics().models.sdk_calls
        seen = sim.statistics()
        assert [r.error for r in results] == [None] * 4
        assert results[0].output == [
            "Echo: question 0",
            "Echo: more question 0",
            "Echo: last question 0",
        ]
        assert seen.served == sdk_calls == 12 and seen.streamed == 4
        assert sum(r.observation.llm_calls for r in results) == 12
        assert sum(r.observation.input_tokens for r in results) == seen.prompt_tokens
        assert sum(r.observation.output_tokens for r in results) == seen.completion_tokens
        assert all(r.observation.cost_usd for r in results)  # gpt-4o-mini has a price

    async def test_async_openai_client_metered(self, tmp_path: Path) -> None:
        """An async openai program (streamed chat and streamed Responses API) is metered
        on the engine's loop, tokens equal to the server's usage."""
        program = write(tmp_path, "program.py", OPENAI_ASYNC)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(metric, program, execution="inline", timeout=60) as ev,
        ):
            assert ev.program_execution == "async"
            results = await ev.evaluate_many(sim.base_url, examples(3))
        seen = sim.statistics()
        assert [r.error for r in results] == [None] * 3
        assert results[2].output == [
            "Echo: question 2",
            "Echo: more question 2",
            "Echo: last question 2",
        ]
        assert seen.served == 9 and seen.streamed == 6
        assert sum(r.observation.input_tokens for r in results) == seen.prompt_tokens
        assert sum(r.observation.output_tokens for r in results) == seen.completion_tokens

    async def test_metric_calls_are_the_judges_usage(self, tmp_path: Path) -> None:
        """SDK calls from a metric are metered as the judge's usage, not the program's."""
        metric = write(
            tmp_path,
            "metric.py",
            """
            import openai

            def score(input, output, expected=None):
                client = openai.OpenAI(base_url=input["url"], api_key="sk-metric", max_retries=0)
                verdict = client.chat.completions.create(
                    model="judge-x",
                    messages=[{"role": "user", "content": f"Answer PASS or FAIL.\\nAnswer: {output}\\nExpected: a"}],
                ).choices[0].message.content
                return (1.0 if verdict.startswith("PASS") else 0.0), {"feedback": verdict}
            """,
        )
        async with Simulator(SimulatorConfig()) as sim:
            rows = [
                {"id": i, "input": {"url": sim.base_url}, "output": "a" if i % 2 else "b"}
                for i in range(4)
            ]
            async with Evaluator(metric, execution="thread", timeout=60) as ev:
                results = await ev.evaluate_many(None, rows)
        seen = sim.statistics()
        assert [r.score for r in results] == [0.0, 1.0, 0.0, 1.0]
        assert sum(r.judge.llm_calls for r in results) == seen.served == 4
        assert sum(r.judge.input_tokens for r in results) == seen.prompt_tokens
        # judge-x has no known price: unmeasured, never $0
        assert all(r.judge.cost_usd is None and r.judge.notes for r in results)


class TestOtherSDKs:
    @pytest.mark.slow
    async def test_litellm_and_dspy_lm(self, tmp_path: Path) -> None:
        """litellm.completion, litellm.acompletion (through asyncio.run in the thread) and
        dspy.LM are routed and metered like the openai client."""
        program = write(
            tmp_path,
            "program.py",
            """
            import asyncio
            import dspy
            import litellm

            def run(artifact, input):
                kw = dict(api_base=artifact, api_key="sk-lite", messages=[{"role": "user", "content": input["q"]}])
                a = litellm.completion(model="openai/gpt-4o-mini", **kw).choices[0].message.content
                b = asyncio.run(litellm.acompletion(model="openai/gpt-4o-mini", **kw)).choices[0].message.content
                lm = dspy.LM("openai/gpt-4o-mini", api_base=artifact, api_key="sk-lite", cache=False)
                c = lm(input["q"])[0]
                return [a, b, c]
            """,
        )
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution="thread", timeout=60
            ) as ev,
        ):
            results = await ev.evaluate_many(sim.base_url, examples(2))
        seen = sim.statistics()
        assert [r.error for r in results] == [None, None], results
        assert results[0].output == ["Echo: question 0"] * 3
        assert sum(r.observation.llm_calls for r in results) == seen.served == 6
        assert sum(r.observation.input_tokens for r in results) == seen.prompt_tokens


class TestWhatIsNotRouted:
    async def test_outside_a_call_the_sdk_is_untouched(self) -> None:
        """While an Evaluator is open, an SDK call made outside any user call goes to its
        server directly, unrouted and unmetered."""
        metric_dir = Path(os.environ.get("TMPDIR", "/tmp"))
        metric = write(metric_dir, f"accept_{os.getpid()}.py", ACCEPT)
        import openai

        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(metric, execution="inline", timeout=10) as ev,
            openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-host") as client,
        ):
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            stats = ev.statistics().models
        assert reply.choices[0].message.content == "Echo: hi"
        assert stats.sdk_calls == 0 and sim.statistics().served == 1

    async def test_sync_client_on_the_loop_goes_out_unmeasured(self, tmp_path: Path) -> None:
        """A sync client inside `async def` cannot be routed without blocking the loop: the
        call goes out as the SDK meant and the example's cost is unmeasured, the note
        saying to use the async client."""
        program = write(
            tmp_path,
            "program.py",
            """
            import openai

            async def run(artifact, input):
                client = openai.OpenAI(base_url=artifact, api_key="sk-x", max_retries=0)
                return client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": input["q"]}]
                ).choices[0].message.content
            """,
        )
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with Simulator(SimulatorConfig()) as sim:
            # The simulator must answer while the loop is blocked: in its own thread.
            with Simulator(SimulatorConfig()).running_in_thread() as threaded:
                async with Evaluator(metric, program, execution="inline", timeout=30) as ev:
                    results = await ev.evaluate_many(threaded.base_url, examples(1))
            del sim
        (result,) = results
        assert result.error is None and result.output == "Echo: question 0"
        assert result.observation.cost_usd is None
        assert any("async client" in note for note in result.observation.notes)

    async def test_non_model_request_in_a_call_is_unmeasured(self, tmp_path: Path) -> None:
        """An SDK request the layer does not route (listing models) goes out as meant and
        makes the example's cost unmeasured, naming the host."""
        program = write(
            tmp_path,
            "program.py",
            """
            import openai

            def run(artifact, input):
                client = openai.OpenAI(base_url=artifact, api_key="sk-x", max_retries=0)
                return [m.id for m in client.models.list()]
            """,
        )
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution="thread", timeout=30
            ) as ev,
        ):
            results = await ev.evaluate_many(sim.base_url, examples(1))
        (result,) = results
        assert result.output == ["simulator"]
        assert result.observation.cost_usd is None
        note = " ".join(result.observation.notes)
        assert "GET 127.0.0.1/v1/models" in note
