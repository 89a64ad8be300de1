"""Calibration of the simulated testbed against the paper (the external check).

Two comparisons, with a card set (default ``a5500``) and a simulated world (its GPU contention,
default the built-in ``a5500`` world), and no per-scenario tuning:

1. Table 3: the noise-free brute-force oracle of each scenario S1-S13 against the paper's oracle
   mapping. A scenario is *reproduced* when the paper's mapping is feasible and within 2% of the
   simulator's best E2E (device-neutral tools and near-ties are latency-equivalent); exact matches
   (the simulator's single best mapping is the paper's) are counted too.
2. Table 2: S5 per-tool latencies under the all-GPU and the oracle mapping, as mean absolute
   percentage error (MAPE) against the paper's figures.

This module reads the paper's oracle mappings; no policy may (policies never import it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentsched.data import paper_tables
from agentsched.experiments.paper import paper_oracle_mapping
from agentsched.loop.metrics import EQUIVALENCE_TOLERANCE as EQUIVALENCE_TOL
from agentsched.model.cards import CardSet
from agentsched.model.mapping import format_mapping_short
from agentsched.model.workflow import Mode
from agentsched.oracle import brute_force
from agentsched.scenarios import list_scenarios, load_scenario
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.world import World, load_world


@dataclass(frozen=True)
class ScenarioCheck:
    """One scenario of the Table 3 comparison."""

    scenario: str
    paper_mapping: str  # the paper's oracle mapping, one letter per task A..D (C/G/Q)
    sim_best_mapping: str  # the simulator's best mapping, same letters
    sim_best_e2e_ms: float  # its noise-free E2E
    paper_mapping_e2e_ms: float | None  # the paper's mapping in the simulator (None: infeasible)
    ratio: float | None  # paper mapping E2E / simulator best
    reproduced: bool  # within EQUIVALENCE_TOL of the best
    exact: bool  # the simulator's best is the paper's mapping
    paper_oracle_e2e_ms: float | None  # Figure 5 / Table 5 oracle E2E where the paper gives one


@dataclass(frozen=True)
class LatencyCheck:
    """One per-tool latency of the Table 2 comparison (S5)."""

    task: str
    tool: str
    mapping: str  # "all_gpu" or "oracle"
    mode: str
    paper_ms: float
    sim_ms: float

    @property
    def ape(self) -> float:
        return abs(self.sim_ms - self.paper_ms) / self.paper_ms


@dataclass(frozen=True)
class CalibrationReport:
    card_set: str
    world: str  # the simulated world (GPU contention) the simulator ran
    scenarios: list[ScenarioCheck] = field(default_factory=list)
    latencies: list[LatencyCheck] = field(default_factory=list)

    @property
    def reproduced(self) -> int:
        return sum(s.reproduced for s in self.scenarios)

    @property
    def exact(self) -> int:
        return sum(s.exact for s in self.scenarios)

    @property
    def mape(self) -> float:
        return sum(x.ape for x in self.latencies) / len(self.latencies)

    def to_dict(self) -> dict[str, Any]:
        return {
            "card_set": self.card_set,
            "world": self.world,
            "reproduced": self.reproduced,
            "exact": self.exact,
            "scenarios": [s.__dict__ for s in self.scenarios],
            "s5_latency_mape": round(self.mape, 4),
            "s5_latencies": [{**x.__dict__, "ape": round(x.ape, 4)} for x in self.latencies],
        }


def check_scenario(name: str, cards: CardSet | None = None, world: World | str | None = None) -> ScenarioCheck:
    wf = load_scenario(name)
    if cards is not None:
        wf = wf.with_cards(cards)
    res = brute_force(wf, SimTestbed(noise_sigma=0.0, world=world))
    best = res.best
    pm = paper_oracle_mapping(wf, name)
    pe = res.entry(pm).e2e_ms
    ratio = None if pe is None else pe / best.e2e_ms  # type: ignore[operator]
    t3 = paper_tables()["table3_scenarios"]
    paper_e2e = t3["oracle_e2e_ms_figure5"].get(name)
    if paper_e2e is None and name in paper_tables()["table5_three_way_S11_S13"]["rows"]:
        paper_e2e = float(paper_tables()["table5_three_way_S11_S13"]["rows"][name][3].split()[0])
    return ScenarioCheck(
        scenario=name,
        paper_mapping=format_mapping_short(wf, pm),
        sim_best_mapping=format_mapping_short(wf, best.mapping),
        sim_best_e2e_ms=round(best.e2e_ms, 3),  # type: ignore[arg-type]
        paper_mapping_e2e_ms=None if pe is None else round(pe, 3),
        ratio=None if ratio is None else round(ratio, 4),
        reproduced=ratio is not None and ratio <= 1 + EQUIVALENCE_TOL,
        exact=best.mapping == pm,
        paper_oracle_e2e_ms=paper_e2e,
    )


def check_s5_latencies(cards: CardSet | None = None, world: World | str | None = None) -> list[LatencyCheck]:
    wf = load_scenario("S5")
    if cards is not None:
        wf = wf.with_cards(cards)
    t2 = paper_tables()["table2_S5_contention"]["rows"]
    sim = SimTestbed(noise_sigma=0.0, world=world)
    out: list[LatencyCheck] = []
    oracle_map = paper_oracle_mapping(wf, "S5")
    for label, mapping, col in (
        ("all_gpu", {t: Mode.GPU_NOW for t in wf.task_ids}, 1),
        ("oracle", oracle_map, 2),
    ):
        ex = sim.expected(wf, mapping)
        for tid, (_tool, row) in zip(wf.task_ids, t2.items(), strict=True):
            span = ex.span(tid)
            assert span is not None and span.run_ms is not None
            out.append(
                LatencyCheck(
                    tid, wf.task_cards[tid].name, label, mapping[tid].value, float(row[col]), round(span.run_ms, 3)
                )
            )
    return out


def calibrate(cards: CardSet | None = None, world: World | str | None = None) -> CalibrationReport:
    """Both comparisons for ``cards`` (default: each scenario's own card set, a5500) in ``world``
    (default: the built-in a5500 world)."""
    w = load_world(world)
    return CalibrationReport(
        card_set=cards.name if cards is not None else "a5500",
        world=w.name,
        scenarios=[check_scenario(s, cards, w) for s in list_scenarios()],
        latencies=check_s5_latencies(cards, w),
    )


def render_calibration(rep: CalibrationReport, console) -> None:  # noqa: ANN001 - rich Console
    from rich.table import Table

    t = Table(title=f"Table 3 oracle mappings: simulator ({rep.card_set} cards, {rep.world} world) vs paper")
    for col in (
        "scenario",
        "paper oracle",
        "paper map E2E ms",
        "sim best",
        "sim best E2E ms",
        "ratio",
        "within 2%",
        "exact",
        "paper E2E ms",
    ):
        t.add_column(col)
    for s in rep.scenarios:
        t.add_row(
            s.scenario,
            s.paper_mapping,
            "infeasible" if s.paper_mapping_e2e_ms is None else f"{s.paper_mapping_e2e_ms:,.0f}",
            s.sim_best_mapping,
            f"{s.sim_best_e2e_ms:,.0f}",
            "-" if s.ratio is None else f"{s.ratio:.3f}",
            "yes" if s.reproduced else "NO",
            "yes" if s.exact else "no",
            "-" if s.paper_oracle_e2e_ms is None else f"{s.paper_oracle_e2e_ms:g}",
        )
    console.print(t)
    console.print("mappings: one letter per task A, B, C, D: C = cpu, G = gpu / gpu_now, Q = gpu_queue")
    console.print(f"reproduced {rep.reproduced}/{len(rep.scenarios)} within 2%, exact {rep.exact}/{len(rep.scenarios)}")
    t2 = Table(title="Table 2 (S5) per-tool latency under contention: simulator vs paper")
    for col in ("mapping", "task", "tool", "mode", "paper ms", "sim ms", "abs % err"):
        t2.add_column(col)
    for x in rep.latencies:
        t2.add_row(x.mapping, x.task, x.tool, x.mode, f"{x.paper_ms:g}", f"{x.sim_ms:,.0f}", f"{100 * x.ape:.1f}")
    console.print(t2)
    console.print(f"S5 latency MAPE: {100 * rep.mape:.1f}%")
