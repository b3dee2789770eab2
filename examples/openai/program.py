"""A grader that asks a model, with the official openai client, whether an answer is right.

Written the usual way: the client takes its base URL and key from the environment
(OPENAI_BASE_URL, OPENAI_API_KEY). skynet-eval routes its calls through its own model
client, so they are rate limited, retried and metered: each example's observation holds
the call's tokens and cost, and with --simulator a local simulator answers them.
"""

from openai import OpenAI

client = OpenAI()


def run(artifact, input):
    reply = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": artifact},
            {
                "role": "user",
                "content": (
                    f"Question: {input['question']}\n"
                    f"Answer: {input['answer']}\n"
                    f"Expected: {input['reference']}"
                ),
            },
        ],
        max_tokens=40,
    )
    text = reply.choices[0].message.content or ""
    return "PASS" if text.strip().upper().startswith("PASS") else "FAIL"
