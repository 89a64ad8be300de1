"""agent-plan: a model-based planner.

One small module per concern:

* ``prior``: the planner's own prior on GPU contention by tag (never the testbed's world);
* ``timeline``: what executions show (per-task latencies, which GPU tasks overlapped);
* ``model``: the online model, fitted from those observations with an uncertainty per parameter;
* ``predict``: E2E and peak VRAM of any mapping, by the project's start rules and contention law;
* ``search``: exhaustive or local search over mappings under a predictor;
* ``probe``: which candidate is worth running, by expected improvement under the model's uncertainty;
* ``policy``: the ``agent-plan`` policy that ties them together.
"""
