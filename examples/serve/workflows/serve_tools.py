"""Trivial user tools for the service examples and its load test: string work, no model, no GPU."""

from __future__ import annotations

from typing import Any

import agentsched


class Split(agentsched.Tool):
    name = "split"
    workload = "split a text into words"
    tags = ("compute-light",)
    has_gpu = False
    input_names = ("text",)

    def run(self, inputs: dict[str, Any]) -> Any:
        return str(inputs["text"]).split()


class Count(agentsched.Tool):
    name = "count"
    workload = "count words"
    tags = ("compute-light",)
    has_gpu = False

    def run(self, inputs: dict[str, Any]) -> Any:
        (words,) = inputs.values()
        return len(words)


class Longest(agentsched.Tool):
    name = "longest"
    workload = "longest word"
    tags = ("compute-light",)
    has_gpu = False

    def run(self, inputs: dict[str, Any]) -> Any:
        (words,) = inputs.values()
        return max(words, key=len) if words else ""


class Summary(agentsched.Tool):
    name = "summary"
    workload = "join two results"
    tags = ("compute-light",)
    has_gpu = False

    def run(self, inputs: dict[str, Any]) -> Any:
        return {str(k): v for k, v in sorted(inputs.items())}


class Shout(agentsched.Tool):
    name = "shout"
    workload = "upper-case a text"
    tags = ("compute-light",)
    has_gpu = False
    input_names = ("text",)

    def run(self, inputs: dict[str, Any]) -> Any:
        return str(inputs["text"]).upper()
