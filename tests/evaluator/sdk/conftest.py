"""User programs that call a model with their own SDK, and helpers to run them."""

from __future__ import annotations

from typing import Any

from evaluator._data._dataset import Example

#: A sync program with the official openai client: a chat completion, a streamed one
#: (its caller asks for no usage) and a Responses API call, per example. The artifact is
#: the base URL the program's client is given.
OPENAI_SYNC = """
import openai

def run(artifact, input):
    client = openai.OpenAI(base_url=artifact, api_key="sk-program-key-0123456789", max_retries=0)
    text = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": input["q"]}]
    ).choices[0].message.content
    parts = []
    for chunk in client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "more " + input["q"]}],
        stream=True,
    ):
        assert chunk.choices, "a usage chunk the program did not ask for"
        parts.append(chunk.choices[0].delta.content or "")
    answer = client.responses.create(model="gpt-4o-mini", input="last " + input["q"])
    return [text, "".join(parts), answer.output_text]
"""

#: The same with the async client, streamed Responses API included.
OPENAI_ASYNC = """
import openai

async def run(artifact, input):
    client = openai.AsyncOpenAI(base_url=artifact, api_key="sk-program-key-0123456789", max_retries=0)
    text = (await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": input["q"]}]
    )).choices[0].message.content
    parts = []
    async for chunk in await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "more " + input["q"]}],
        stream=True, stream_options={"include_usage": True},
    ):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
    final = ""
    async for event in await client.responses.create(
        model="gpt-4o-mini", input="last " + input["q"], stream=True
    ):
        if event.type == "response.completed":
            final = event.response.output_text
    return [text, "".join(parts), final]
"""

#: A metric that answers ok for every output (the program's part is under test).
ACCEPT = """
def score(input, output, expected=None):
    return 1.0, {"feedback": "ok"}
"""


def examples(n: int, **extra: Any) -> list[Example]:
    return [Example(id=f"e{i}", input={"q": f"question {i}", **extra}) for i in range(n)]
