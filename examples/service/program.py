"""The service's program: ask the model, with the artifact as its instruction."""

from skynet import llm


def run(artifact, input):
    return llm(str(artifact or "Answer the customer in one sentence."), input=input["message"])
