"""Issue 13 item 1: large workflows are capped by count with the limits in the error, parsed with the
C loader when present (duplicate-key and merge-key checks kept), and the structure queries are
linear (checked for equality with the plain definitions, not for time)."""

import itertools
import json
import random

import networkx as nx
import pytest
import yaml

from agentsched.errors import WorkflowError
from agentsched.model import Workflow
from agentsched.model import workflow_io as workflow_mod
from agentsched.model.workflow import MAX_EDGES, MAX_SEQUENCE_ITEMS, MAX_TASKS
from agentsched.model.workflow_io import load_workflow_file, load_yaml
from agentsched.policies._common import CpuCores


def random_dag(n: int, seed: int, fan: int = 3) -> Workflow:
    rng = random.Random(seed)
    tasks = {f"T{i}": "clip" for i in range(n)}
    edges = set()
    for i in range(1, n):
        for _ in range(rng.randrange(0, fan)):
            edges.add((f"T{rng.randrange(0, i)}", f"T{i}"))
    order = list(tasks)
    rng.shuffle(order)  # file order differs from the index order of the edges
    return Workflow(name="r", tasks={t: tasks[t] for t in order}, edges=sorted(edges))


def test_task_cap_names_the_limit(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"tasks": {f"T{i}": "clip" for i in range(MAX_TASKS + 1)}}))
    with pytest.raises(WorkflowError, match=f"{MAX_TASKS + 1:,} tasks; at most {MAX_TASKS:,}"):
        load_workflow_file(p)


def test_edge_cap_names_the_limit(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"tasks": {"A": "clip", "B": "clip"}, "edges": [["A", "B"]] * (MAX_EDGES + 1)}))
    with pytest.raises(WorkflowError, match=f"at most {MAX_EDGES:,} are allowed"):
        load_workflow_file(p)


def test_aliased_yaml_list_is_refused_before_it_is_built(tmp_path):
    p = tmp_path / "w.yaml"
    n = MAX_SEQUENCE_ITEMS + 1
    p.write_text("tasks: {A: clip, B: clip}\ne: &e [A, B]\nedges: [" + ", ".join(["*e"] * n) + "]\n")
    with pytest.raises(
        WorkflowError, match=f"invalid YAML.*a list of {n:,} items \\(at most {MAX_SEQUENCE_ITEMS:,}\\)"
    ):
        load_workflow_file(p)


@pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False), reason="PyYAML built without libyaml")
def test_c_loader_is_used_and_keeps_the_checks():
    assert issubclass(workflow_mod._UniqueKeyLoader, yaml.CSafeLoader)
    with pytest.raises(yaml.YAMLError, match="duplicate key 'A'"):
        load_yaml("tasks:\n  A: clip\n  A: ocr\n")
    doc = load_yaml("base: &b {tool: clip}\ntasks:\n  A: {<<: *b, repeat: 2}\n")
    assert doc["tasks"]["A"] == {"tool": "clip", "repeat": 2}
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: !!python/object:os.system x\n")  # still a safe loader


@pytest.mark.parametrize("seed", range(5))
def test_preds_succs_and_concurrency_match_the_graph_definitions(seed):
    wf = random_dag(60, seed)
    g = wf.graph
    for t in wf.task_ids:
        assert wf.preds[t] == tuple(p for p, c in wf.edges if c == t)
        assert wf.succs[t] == tuple(c for p, c in wf.edges if p == t)
        related = nx.ancestors(g, t) | nx.descendants(g, t) | {t}
        expected = frozenset(u for u in wf.task_ids if u not in related)
        assert wf.concurrent[t] == expected
        for u in wf.task_ids:
            assert wf.may_overlap(t, u) == (u in expected)
    assert wf.sinks == [t for t in wf.task_ids if not wf.succs[t]]
    assert list(wf.concurrent) == wf.task_ids and len(wf.concurrent) == len(wf.task_ids)


def _earliest_all_cores(busy, ready_ms, cost_ms):
    """The insertion rule scanning every core (the definition the fast path must equal)."""
    best = None
    for core, slots in enumerate(busy):
        start = ready_ms
        for s, e in slots:
            if start + cost_ms <= s + 1e-9:
                break
            start = max(start, e)
        if best is None or start < best[0] - 1e-9:
            best = (start, core)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_cpu_cores_fast_path_equals_scanning_every_core(seed):
    # the fast path skips cores beyond the first unused one and, by bisection, the slots that end
    # before the task is ready; zero-cost tasks (which may take a gap in front of such a slot) included
    rng = random.Random(seed)
    cores = CpuCores(rng.choice([1, 2, 3, 50]))
    for _ in range(400):
        ready = rng.choice([0.0, rng.uniform(0, 500), rng.uniform(0, 5000)])
        cost = rng.choice([10.0, rng.uniform(1, 100), 0.0, 1e-12])
        got = cores.earliest(ready, cost)
        assert got == _earliest_all_cores(cores.busy, ready, cost)
        cores.book(got[1], got[0], got[0] + cost)


def test_oracle_refusal_is_short_on_a_large_workflow(cli, tmp_path):
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"tasks": {f"T{i}": "clip" for i in range(2000)}}))
    code, out, err = cli("oracle", str(p))
    assert code == 2 and "about 10^602 mappings; limit 60,000" in err and len(err) < 200


def test_run_prints_mode_counts_for_a_large_workflow(cli, tmp_path):
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"tasks": {f"T{i}": "clip" for i in range(40)}}))
    code, out, err = cli("run", str(p), "-p", "all-gpu", "--rounds", "1", "--repeats", "1")
    assert code == 0, err
    assert "R0   40 tasks: 40 gpu" in out
    assert "T0=" not in out  # the full mapping is left to --json


def test_show_prints_plain_rows_beyond_the_rich_limit(cli, tmp_path):
    p = tmp_path / "big.json"
    p.write_text(
        json.dumps(
            {"tasks": {f"T{i}": "clip" for i in range(300)}, "edges": [[f"T{i}", f"T{i + 1}"] for i in range(299)]}
        )
    )
    code, out, err = cli("show", str(p))
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.startswith("edges (299): T0->T1, T1->T2") for line in lines)
    assert sum(1 for line in lines if line.startswith("T")) == 300


def _long_form_yaml(n_tasks: int, n_edges: int) -> str:
    """Tasks written out in full ({tool, repeat}) and [a, b] edges: the most YAML per task and edge."""
    lines = ["name: big", "cards: a5500", "decision_space: three_way", "tasks:"]
    lines += [f"  T{i}: {{tool: clip, repeat: 2}}" for i in range(n_tasks)]
    lines.append("edges:")
    pairs = ((i, j) for i in range(n_tasks) for j in range(i + 1, n_tasks))
    lines += [f"  - [T{i}, T{j}]" for i, j in itertools.islice(pairs, n_edges)]
    return "\n".join(lines) + "\n"


def test_a_yaml_over_the_caps_is_refused_from_its_shape_before_it_is_built(tmp_path):
    import tracemalloc

    p = tmp_path / "big.yaml"
    p.write_text("name: big\ntasks:\n" + "".join(f"  T{i}: {{tool: clip}}\n" for i in range(200_000)))
    tracemalloc.start()
    try:
        with pytest.raises(
            WorkflowError,
            match=f"^{p}: too large for a workflow: more than [0-9,]+ YAML nodes "
            f"\\(at most {MAX_TASKS:,} tasks and {MAX_EDGES:,} edges\\)$",
        ):
            load_workflow_file(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text_mb = p.stat().st_size / 2**20
    assert peak / 2**20 < text_mb + 16  # the text itself and the parser's buffers: no document was built


def test_the_largest_workflow_within_the_caps_passes_the_shape_check():
    from agentsched.model.yaml_shape import max_workflow_events, yaml_too_large

    largest = _long_form_yaml(MAX_TASKS, MAX_EDGES)
    assert yaml_too_large(largest, MAX_TASKS, MAX_EDGES) is None
    events = sum(1 for _ in yaml.parse(largest, Loader=yaml.SafeLoader))
    assert events <= max_workflow_events(MAX_TASKS, MAX_EDGES) < 1.05 * events  # a tight bound, not a guess


def test_asking_every_tasks_concurrent_set_keeps_memory_linear():
    import tracemalloc

    wf = Workflow(name="wide", tasks={f"T{i}": "clip" for i in range(1500)})  # no edges: every set is n - 1
    wf.related_masks  # noqa: B018 - built first: the n-bit masks are the linear part kept on purpose
    tracemalloc.start()
    try:
        sizes = [len(wf.concurrent[t]) for t in wf.task_ids]
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sizes == [1499] * 1500
    assert kept < 16 * 2**20  # keeping all 1,500 sets of 1,499 would be ~100 MB (quadratic)
    assert wf.concurrent["T7"] == frozenset(wf.task_ids) - {"T7"}  # rebuilt after it left the cache
