"""The prompt: the four evidence streams as text, with regime-specific guidance, and the optional
fifth (model predictions).

Templates live in ``agent/prompts/<name>.<version>.md`` (versioned; a change of wording is a new
version, so recorded runs stay reproducible). The prompt never states a target mapping: outside the
optional "Model predictions" section the only complete mappings it contains are rounds already
executed (the history stream); what-ifs are written relative to a mapping ("B->cpu"). The
predictions section (present only when the view carries ``predictions``: ``AgentPolicy(predictions=True)``)
lists the planner's candidate mappings as predictions with a range, framed as estimates, never as
instructions; without it the prompt is byte-identical to the four-stream prompt. Likewise the "Load
at decision time" section (present only when the view carries a ``load`` that is not idle): what
runs and waits on the machine now, as measured state, never as advice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from string import Template

from agentsched.agent.view import AgentView
from agentsched.errors import AgentschedError
from agentsched.model.mapping import format_mapping
from agentsched.model.text import plural
from agentsched.model.workflow import DecisionSpace, Mode
from agentsched.monitor.render import average_lines, whatif_line

PROMPT_VERSION = "v1"  # the template set in use
MAX_EARLIER_WHATIFS = 5  # earlier what-ifs that beat the best, listed in the monitor stream
MAX_LOAD_ROWS = 12  # GPU tasks listed one by one in the load stream (longest expected remaining first)


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt."""

    version: str  # template version, e.g. "v1"
    system: str  # system message
    user: str  # user message (the four streams, guidance, answer format)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    def text(self) -> str:
        """Both messages as one auditable string."""
        return f"[system]\n{self.system}\n\n[user]\n{self.user}"


@lru_cache(maxsize=64)
def load_template(name: str, version: str = PROMPT_VERSION) -> str:
    """Template ``name`` of ``version`` from the package's ``agent/prompts`` folder."""
    path = resources.files("agentsched.agent").joinpath("prompts", f"{name}.{version}.md")
    try:
        return path.read_text(encoding="utf-8").rstrip("\n")
    except (FileNotFoundError, OSError):
        raise AgentschedError(f"prompt template {name}.{version}.md is missing from agentsched/agent/prompts") from None


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if abs(x) >= 10 else f"{x:.3g}"


def _of_rounds(rounds: int | None) -> str:
    """Where the round stands in the run: ``of R0..R9``, or that the run is endless (a runtime)."""
    return f"of R0..R{rounds - 1}" if rounds is not None else "of an endless run (no last round)"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(r) + " |" for r in rows)
    return lines


def _topology(view: AgentView) -> list[str]:
    wf = view.workflow
    ids = wf.task_ids
    if not wf.edges:
        shape = f"fan-out: {' || '.join(ids)} (every task is ready at t=0 and they all run at the same time)"
    elif view.topology == "diamond":
        shape = f"diamond: {ids[0]} -> ({ids[1]} || {ids[2]}) -> {ids[3]}"
    else:
        shape = "DAG (see edges)"
    edges = ", ".join(f"{a}->{b}" for a, b in wf.edges) or "none"
    sp = wf.decision_space
    modes = ", ".join(f"`{sp.label(m)}`" for m in sp.modes)
    budget = "none" if wf.vram_budget_mb is None else f"{wf.vram_budget_mb:g} MB"
    return [
        f"Tasks: {', '.join(ids)}. Topology: {shape}.",
        f"Edges: {edges}.",
        f"Decision space: {sp.value} ({modes}). VRAM budget: {budget}.",
    ]


def _tools(view: AgentView) -> list[str]:
    wf = view.workflow
    three = wf.decision_space is DecisionSpace.THREE_WAY
    if view.warm:
        header = [
            "task",
            "tool",
            "workload",
            "cpu ms",
            "gpu ms",
            "ratio",
            *(["load ms"] if three else []),
            "VRAM MB",
            "tags",
        ]
        rows = []
        for t in wf.task_ids:
            c = view.tools[t].card
            assert c is not None
            ratio = "-" if c.speedup is None else f"{c.speedup:.1f}"
            rows.append(
                [
                    t,
                    c.name,
                    c.workload,
                    _num(c.cpu_ms),
                    "no GPU" if c.gpu_ms is None else _num(c.gpu_ms),
                    ratio,
                    *([_num(c.load_ms) if c.has_gpu else "-"] if three else []),
                    _num(c.vram_mb) if c.has_gpu else "-",
                    ", ".join(c.tags),
                ]
            )
        return [
            "## 2. Tool cards (warm start: isolated profiles measured offline, one run of each task)",
            *_table(header, rows),
        ]
    rows = [
        [t, v.tool, v.workload or "-", ", ".join(v.tags) or "-"] for t, v in ((t, view.tools[t]) for t in wf.task_ids)
    ]
    return [
        "## 2. Tools (cold start: no profiles)",
        "No latency or memory figure is known before it is measured: judge from the names, tags and "
        "workload descriptions, then from the history and the monitor.",
        *_table(["task", "tool", "workload", "tags"], rows),
    ]


def _history(view: AgentView) -> list[str]:
    wf = view.workflow
    out = ["## 3. Execution history"]
    if not view.history:
        out.append("No rounds yet: this is the first round.")
        return out
    for h in view.history:
        head = f"R{h.round}: {format_mapping(wf, h.mapping)} -> "
        if h.ok:
            out.append(f"{head}ok, E2E {h.e2e_ms:.0f} ms, peak VRAM {h.peak_vram_mb:.0f} MB")
        elif not h.judged:  # not "infeasible": the mapping is neither
            out.append(f"{head}{h.status.value.upper()}, not the mapping's doing: {h.message}")
        else:
            out.append(f"{head}{h.status.value.upper()} (infeasible), peak VRAM {h.peak_vram_mb:.0f} MB: {h.message}")
    b = view.best
    if b is None:
        out.append("Best so far: none (no feasible round yet).")
    else:
        out.append(f"Best so far: the mapping of R{b.first_round}, mean E2E {b.e2e_ms:.0f} ms over {b.samples} runs.")
    return out


def _relative(view: AgentView, mapping: dict[str, Mode], base: dict[str, Mode]) -> str:
    sp = view.workflow.decision_space
    moved = [f"{t}->{sp.label(mapping[t])}" for t in view.workflow.task_ids if mapping[t] is not base[t]]
    return ", ".join(moved)


def _monitor(view: AgentView) -> list[str]:
    wf = view.workflow
    sp = wf.decision_space
    ev = view.evidence
    out = ["## 4. Runtime monitor"]
    if not view.monitor_enabled:
        out.append("The monitor is off: no running averages, what-ifs or hints.")
        return out
    if ev is None:
        out.append("No evidence yet: the monitor reports after the first round.")
        return out
    out.append(
        f"After R{ev.round}: contention (Factor A) {'detected' if ev.contention else 'not detected'}; "
        f"memory pressure (Factor B) {'detected' if ev.memory_pressure else 'not detected'}."
    )
    if ev.averages:
        out.append("Running averages (per task and placement, measured under contention):")
        out.extend(f"- {line}" for line in average_lines(ev.averages, sp, cards=view.warm))
    if ev.whatifs:
        out.append(f"What-ifs around the R{ev.round} mapping (one task moved, the rest fixed; each measured):")
        out.extend(f"- {whatif_line(w, sp, wf.vram_budget_mb)}" for w in ev.whatifs)
    best = view.best
    if best is not None:
        earlier = sorted(
            (
                m
                for m in view.measured
                if not m.was_round
                and m.mean_e2e_ms is not None
                and m.mean_e2e_ms < best.e2e_ms
                and not any(w.mapping == m.mapping for w in ev.whatifs)
            ),
            key=lambda m: m.mean_e2e_ms,
        )[:MAX_EARLIER_WHATIFS]
        if earlier:
            out.append("Earlier measured what-ifs that beat the best, relative to the best mapping:")
            out.extend(
                f"- best with {_relative(view, m.mapping, best.mapping)}: {m.mean_e2e_ms:.0f} ms (mean of {m.samples})"
                for m in earlier
            )
    if ev.hints:
        out.append("Hints:")
        out.extend(f"- {h.text}" for h in ev.hints)
    if not view.warm and view.observed_vram_mb:
        seen = ", ".join(f"{t} {view.observed_vram_mb[t]:.0f} MB" for t in wf.task_ids if t in view.observed_vram_mb)
        out.append(f"VRAM seen held on the GPU: {seen}.")
    if ev.unobserved:
        pairs = ", ".join(f"{t} on {sp.label(m)}" for t, m in ev.unobserved)
        out.append(f"Placements never seen in a feasible run: {pairs}.")
    return out


def _predictions(view: AgentView, number: int, version: str) -> list[str]:
    """Stream 5: the planner's top candidates, as predictions with their range (only when the view has them)."""
    pr = view.predictions
    assert pr is not None
    wf = view.workflow
    out = [
        f"## {number}. Model predictions (estimates of a model, not measurements; optional stream)",
        load_template("predictions", version),
    ]
    if not pr.candidates:
        out.append(f"No predictions this round: {pr.note}.")
        return out
    lo, hi = (f"{q:.0%}" for q in pr.quantiles)
    search = (
        f"every one of the {pr.evaluated} mappings" if pr.exhaustive else f"{pr.evaluated} mappings by local search"
    )
    if pr.executions:
        basis = (
            f"Model fitted to {plural(pr.executions, 'execution')} (rounds and probes); it estimates "
            f"run-to-run noise at about {pr.noise_sigma:.0%} per task."
        )
    else:
        basis = (
            "The model has seen no execution yet: its figures are the cards' isolated profiles with a prior "
            f"on GPU contention by tag (run-to-run noise assumed about {pr.noise_sigma:.0%} per task)."
        )
    out.append(
        f"{basis} Range: the {lo} to {hi} quantiles of the predicted E2E over {pr.draws} draws from "
        "the model's uncertainty (noise not included)."
    )
    fits = "" if wf.vram_budget_mb is None else "; each predicted to fit the VRAM budget"
    out.append(
        f"Its {plural(len(pr.candidates), 'mapping')} with the lowest predicted E2E (searched {search}"
        f"{fits}), lowest first:"
    )
    rows = []
    for i, c in enumerate(pr.candidates, 1):
        m = view.measured_for(c.mapping)
        if m is None:
            seen = "never run"
        elif m.mean_e2e_ms is None:
            seen = "ran infeasible"
        else:
            seen = f"{m.mean_e2e_ms:.0f} ms (mean of {m.samples}{', a round' if m.was_round else ', a probe'})"
        rows.append(
            [
                f"P{i}",
                format_mapping(wf, c.mapping),
                f"{c.e2e_ms:.0f}",
                f"{c.e2e_low_ms:.0f}-{c.e2e_high_ms:.0f}",
                f"{c.peak_vram_mb:.0f}",
                seen,
            ]
        )
    out.extend(_table(["#", "mapping", "predicted E2E ms", "range ms", "predicted peak VRAM MB", "measured"], rows))
    return out


def _load(view: AgentView, number: int, version: str) -> list[str]:
    """Stream 6: the machine's load when the decision is made (only when the view has a load that is not idle)."""
    ld = view.load
    assert ld is not None
    budget = "no budget" if ld.vram_budget_mb is None else f"of a {ld.vram_budget_mb:.0f} MB budget"
    out = [
        f"## {number}. Load at decision time (measured now, shared with other invocations)",
        load_template("load", version),
        f"- GPU: {plural(len(ld.gpu_tasks), 'task')} running; VRAM in use {ld.vram_in_use_mb:.0f} MB {budget}.",
        f"- GPU queue: {plural(ld.queue_length, 'task')} waiting"
        + (f" ({ld.queue_backlog_ms:.0f} ms of load and GPU time by their cards)." if ld.queue_length else "."),
        f"- CPU: {ld.cpu_busy} of {ld.cpu_slots} slots busy; {plural(ld.cpu_waiting, 'task')} waiting for a slot.",
        f"- Invocations: {ld.in_flight} in flight; {ld.admission_waiting} waiting at admission.",
    ]
    if ld.gpu_tasks:
        rows = [
            [
                g.tool,
                g.mode + (" (loading)" if g.loading else ""),
                _num(g.elapsed_ms),
                _num(g.expected_remaining_ms),
                _num(g.vram_mb),
            ]
            for g in ld.gpu_tasks[:MAX_LOAD_ROWS]
        ]
        out.extend(_table(["tool on the GPU", "mode", "elapsed ms", "expected remaining ms (card)", "VRAM MB"], rows))
        rest = ld.gpu_tasks[MAX_LOAD_ROWS:]
        if rest:
            out.append(
                f"... and {plural(len(rest), 'more task')} ({sum(g.expected_remaining_ms for g in rest):.0f} ms "
                f"of expected remaining time, {sum(g.vram_mb for g in rest):.0f} MB together)."
            )
    return out


def build_prompt(view: AgentView, version: str = PROMPT_VERSION) -> Prompt:
    """Render the prompt for ``view.round``."""
    wf = view.workflow
    sp = wf.decision_space
    three = sp is DecisionSpace.THREE_WAY
    semantics = load_template("semantics_three_way" if three else "semantics_binary", version)
    guidance = load_template("guidance_three_way" if three else "guidance_binary", version)
    evidence = Template(
        load_template("guidance_evidence_three_way" if three else "guidance_evidence_binary", version)
    ).substitute(stability=f"{view.stability:.0%}")
    answer = Template(load_template("answer", version)).substitute(
        tasks=", ".join(wf.task_ids), modes=", ".join(sp.label(m) for m in sp.modes)
    )
    fifth = view.predictions is not None
    predictions = [*_predictions(view, 5, version), ""] if fifth else []
    loaded = view.load is not None and not view.load.idle
    n = 5 + fifth
    load = [*_load(view, n, version), ""] if loaded else []
    n += loaded
    system = load_template("system", version)
    if fifth:
        system += "\n\n" + load_template("system_predictions", version)
    parts = [
        f"# Round R{view.round} {_of_rounds(view.rounds)}: workflow {wf.name}, {view.start} start",
        "",
        "## 1. DAG topology and execution semantics",
        *_topology(view),
        semantics,
        "",
        *_tools(view),
        "",
        *_history(view),
        "",
        *_monitor(view),
        "",
        *predictions,
        *load,
        f"## {n}. Guidance",
        guidance,
        "",
        evidence,
        "",
        f"## {n + 1}. Answer",
        answer,
    ]
    return Prompt(version, system, "\n".join(parts) + "\n")
