"""The results documents: results.json of a bench (schema: agentsched/data/results.schema.json) and
the JSON of ``agentsched run``, from one set of writers (rounds, oracles, options), so a round or an
oracle reads the same in both. The report renders these documents; nothing here runs anything."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from agentsched.experiments.paper import paper_oracle
from agentsched.loop.metrics import OracleView, RunMetrics
from agentsched.loop.runner import LoopRun
from agentsched.model.workflow import Mode, Workflow
from agentsched.oracle import OracleResult

if TYPE_CHECKING:
    from agentsched.experiments.bench_records import BenchResult
    from agentsched.policies.base import Policy

SCHEMA_VERSION = 1


def _modes(mapping: Mapping[str, Any]) -> dict[str, str]:
    return {t: getattr(m, "value", str(m)) for t, m in mapping.items()}


def round_dicts(run: LoopRun, view: OracleView | None) -> list[dict[str, Any]]:
    """Per-round records as results.json and ``run --json``/``--json-out`` write them."""
    out = []
    for rec in run.records:
        r = rec.result
        ref = view.reference(r.mapping) if view is not None else None
        out.append(
            {
                "round": r.round,
                "mapping": _modes(r.mapping),
                "e2e_ms": None if r.e2e_ms is None else round(r.e2e_ms, 3),
                "status": r.status.value,
                "executions": rec.executions_after,
                "probes": len(rec.probes),
                "peak_vram_mb": round(r.peak_vram_mb, 3),
                "message": r.message,
                "reference_e2e_ms": None if ref is None else round(ref, 3),
            }
        )
        if rec.proposal_info.get("fallback"):  # an LLM reasoner's answer was unusable: the rules decided
            out[-1]["fallback"] = str(rec.proposal_info["fallback"])
    return out


def paper_mapping_reference_ms(wf: Workflow, view: OracleView) -> float | None:
    """Our reference E2E of the paper's oracle mapping (None: not a paper scenario, or infeasible here)."""
    paper = paper_oracle(wf.name)
    if paper is None or set(paper["mapping"]) != set(wf.task_ids):
        return None
    mapping = {t: Mode(m) for t, m in paper["mapping"].items()}
    if any(m not in wf.decision_space.modes for m in mapping.values()):
        return None
    return view.reference(mapping)


def oracle_dict(wf: Workflow, res: OracleResult, view: OracleView, paper_figures: bool = True) -> dict[str, Any]:
    """``paper_figures``: False for a workflow that is not the built-in scenario of its name."""
    paper = paper_oracle(wf.name) if paper_figures else None
    paper_ref = paper_mapping_reference_ms(wf, view) if paper_figures else None
    return {
        "workflow": wf.name,
        "decision_space": wf.decision_space.value,
        "vram_budget_mb": wf.vram_budget_mb,
        "total_vram_mb": round(wf.total_vram_mb, 3),
        "card_set": wf.card_set.name,
        "mapping": _modes(view.best),
        "e2e_ms": round(view.e2e_ms, 3),
        "tied_mappings": [_modes(m) for m in view.best_mappings],
        "equivalent_mappings": [_modes(m) for m in view.equivalent_mappings],
        "mappings_total": view.mappings_total,
        "feasible": view.feasible_total,
        "executions": res.executions,
        "paper_mapping": None if paper is None else paper["mapping"],
        "paper_e2e_ms": None if paper is None else paper["e2e_ms"],
        "paper_mapping_e2e_ms": None if paper_ref is None else round(paper_ref, 3),
    }


def results_dict(result: BenchResult) -> dict[str, Any]:
    """The results.json document (schema: agentsched/data/results.schema.json)."""
    from agentsched import __version__

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generator": f"agentsched {__version__}",
        "config": result.config.to_dict(),
        "wall_s": round(result.wall_s, 3),
        "notes": list(result.notes),
        "skipped": [{"scenario": sc, "policy": pol, "reason": why} for (sc, pol), why in result.skipped.items()],
        "policy_info": result.policy_info,
        "oracles": {
            n: oracle_dict(wf, result.oracles[n], result.views[n], n in result.paper_scenarios())
            for n, wf in result.workflows.items()
        },
        "records": [
            {
                "scenario": r.scenario,
                "policy": r.policy,
                "online": r.online,
                "seed": r.seed,
                "rounds": round_dicts(r.run, result.views[r.scenario]),
                "metrics": r.metrics.to_dict(),
            }
            for r in result.records
        ],
        "summary": [s.to_dict() for s in result.summary()],
    }
    if result.ablation is not None:
        doc["ablation"] = result.ablation.to_dict()
    if result.heft_study is not None:
        doc["heft_study"] = result.heft_study.to_dict()
    return doc


def results_schema() -> dict[str, Any]:
    """The JSON Schema of results.json shipped with the package."""
    return json.loads((resources.files("agentsched.data") / "results.schema.json").read_text())


def run_document(
    wf: Workflow,
    policy_name: str,
    policy: Policy,
    seed: int,
    testbed: dict[str, Any],
    run: LoopRun,
    view: OracleView | None,
    metrics: RunMetrics | None,
) -> dict[str, Any]:
    """The JSON of ``agentsched run`` (docs/json.md): the rounds with their evidence, the best round,
    the oracle and the metrics. ``testbed``: ``{"name", "notes"}`` of the testbed the run used."""
    rounds_out = round_dicts(run, view)
    for d, rec in zip(rounds_out, run.records, strict=True):
        d["evidence"] = rec.evidence
        for key in ("prompt", "response"):
            if key in rec.proposal_info:
                d[key] = rec.proposal_info[key]
    best = run.best_round()
    return {
        "workflow": wf.name,
        "policy": policy_name,
        "online": policy.online,
        "seed": seed,
        "policy_info": policy.describe(),  # e.g. an LLM's model and base URL (credentials redacted)
        "testbed": testbed,
        "rounds": rounds_out,
        "best": None
        if best is None
        else {
            "round": best.round,
            "mapping": {t: m.value for t, m in best.mapping.items()},
            "e2e_ms": round(best.e2e_ms or 0.0, 3),
        },
        "oracle": None
        if view is None
        else {"mapping": {t: m.value for t, m in view.best.items()}, "e2e_ms": round(view.e2e_ms, 3)},
        "metrics": None if metrics is None else metrics.to_dict(),
    }
