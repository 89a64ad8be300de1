"""``--llm-base-url gguf:PATH`` constrains decoding to the placement schema (issue 21, item 3).

llama-cpp-python is not installed in the test environment (it compiles for ~15 min), so a stand-in
module named ``llama_cpp`` is injected: its ``Llama`` records what ``create_chat_completion`` is
given and its ``LlamaGrammar.from_json_schema`` records the schema text. This checks the handoff
(the request's schema becomes a grammar passed to llama.cpp), NOT llama.cpp's decoding; that needs a
real model (docs/agent.md says what was measured and what was not)."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import pytest

from agentsched.agent.llm.dialects import placement_schema, response_schema
from agentsched.agent.local_llm import GrammarCache, completion, llama_structured_output, request_schema
from agentsched.agent.policy import AgentPolicy
from agentsched.loop.runner import run_loop
from tests.support.llm_servers import UNCONSTRAINED, schema_answer
from tests.support.scripted_testbed import ScriptedTestbed, mapping, workflow


class FakeGrammar:
    def __init__(self, schema_text: str) -> None:
        self.schema = json.loads(schema_text)


def fake_llama_cpp() -> types.ModuleType:
    """A stand-in ``llama_cpp``: grammars from schemas, a model that follows the grammar it gets."""
    mod = types.ModuleType("llama_cpp")
    mod.__spec__ = importlib.machinery.ModuleSpec("llama_cpp", None)  # found by importlib.util.find_spec
    mod.compiled = []  # schema texts given to LlamaGrammar.from_json_schema
    mod.calls = []  # keyword arguments of every create_chat_completion

    class LlamaGrammar:
        @staticmethod
        def from_json_schema(text: str, verbose: bool = True) -> FakeGrammar:
            mod.compiled.append(text)
            return FakeGrammar(text)

    class Llama:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def create_chat_completion(self, **kwargs):
            mod.calls.append(kwargs)
            grammar = kwargs.get("grammar")
            return completion(schema_answer(grammar.schema) if grammar else UNCONSTRAINED, "tiny")

    mod.Llama, mod.LlamaGrammar = Llama, LlamaGrammar
    return mod


@pytest.fixture
def llama(monkeypatch):
    mod = fake_llama_cpp()
    monkeypatch.setitem(sys.modules, "llama_cpp", mod)
    return mod


def test_gguf_rounds_are_decoded_under_the_schema_grammar(llama, tmp_path):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    policy = AgentPolicy("llm", llm={"base_url": f"gguf:{model}", "timeout_s": 10.0})
    try:
        r = run_loop(workflow("binary", None), policy, ScriptedTestbed(), rounds=3, repeats=1)
    finally:
        policy.close()
    wf = workflow("binary", None)
    assert [x.mapping for x in r.rounds] == [mapping("cpu cpu cpu cpu")] * 3  # never a fallback
    assert all(rec.proposal_info["fallback"] is None for rec in r.records)
    assert all(rec.proposal_info["response"][0]["response_format"] == "json_schema" for rec in r.records)
    assert [json.loads(t) for t in llama.compiled] == [placement_schema(wf)]  # compiled once, reused
    assert all(isinstance(c["grammar"], FakeGrammar) and "response_format" not in c for c in llama.calls)
    assert all(c["max_tokens"] == 512 for c in llama.calls)


def test_every_place_a_client_puts_the_schema_becomes_a_grammar(llama):
    wf = workflow()
    schema = placement_schema(wf)
    grammars = GrammarCache(llama)
    for body in (
        {"response_format": response_schema(wf)},
        {"response_format": {"type": "json_object", "schema": schema}},
        {"guided_json": schema},
        {"format": schema},
    ):
        assert request_schema(body) == schema
        assert llama_structured_output(body, grammars)["grammar"].schema == schema
    assert len(llama.compiled) == 1  # one schema, one compilation
    assert llama_structured_output({"response_format": {"type": "json_object"}}, grammars) == {
        "response_format": {"type": "json_object"}
    }
    assert llama_structured_output({}, grammars) == {}


def test_a_schema_llama_cpp_cannot_compile_moves_the_client_down_its_chain(llama, tmp_path, monkeypatch):
    def refuse(text, verbose=True):
        raise ValueError("unsupported keyword")

    monkeypatch.setattr(llama.LlamaGrammar, "from_json_schema", staticmethod(refuse))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    policy = AgentPolicy("llm", llm={"base_url": f"gguf:{model}", "timeout_s": 10.0, "max_retries": 0})
    try:
        r = run_loop(workflow("binary", None), policy, ScriptedTestbed(), rounds=1, repeats=1)
    finally:
        policy.close()
    first = r.records[0].proposal_info["response"][0]
    # json_schema and json_object+schema refused (HTTP 500 naming the grammar); json_object answered
    assert [x.split(":")[0] for x in first["response_format_rejected"]] == ["json_schema", "json_object+schema"]
    assert "cannot be compiled to a grammar: unsupported keyword" in first["response_format_rejected"][0]
    assert first["response_format"] == "json_object"
    assert llama.calls[-1].get("response_format") == {"type": "json_object"}
