"""The online model: per tool, its latencies (CPU, GPU, queue load), VRAM, and GPU contention
(sensitivity s, pressure p of ``rate_i = 1 / (1 + s_i * sum_{j != i} p_j)``), each with an
uncertainty, fitted from what executions show.

Parameters are per *unit tool* (``clip`` for a task ``clip x 12``): a task of K back-to-back calls
takes K times the unit latency, with the unit's VRAM, load and contention.

Fit (Bayesian non-linear regression, Laplace approximation). For a finished GPU run i cut into
segments k of duration d_k beside foreign pressure P_k = sum of the others' p, the isolated work it
did is ``W_i = sum_k d_k / (1 + s_i P_k)``. The simulator's noise multiplies that work by
exp(N(0, sigma)), so ``log W_i - log K_i - log g_u = eps_i`` exactly, with g_u the unit's GPU latency.
Unknowns theta = (log g_u, log s_u, log p_u) per GPU tool, with a Gaussian prior (card latencies,
tag prior on contention: ``prior.py``); the MAP is found by Levenberg-Marquardt with the analytic
Jacobian and the posterior covariance is the inverse Hessian there. CPU latencies and loads have
conjugate log-normal updates. The noise sigma is estimated from the isolated runs.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Workflow
from agentsched.planner import prior as pr
from agentsched.planner.predict import TaskParams
from agentsched.planner.timeline import ExecutionObservations, GpuRun

_AMPLIFIED = re.compile(r"^(?P<base>.+)_x(?P<k>[1-9][0-9]*)$")
DEFAULT_NOISE_SIGMA = 0.05  # log-latency noise assumed before enough isolated runs are seen
MAX_GPU_RUNS_PER_TOOL = 150  # most recent GPU runs kept per unit tool (bounds the fit's cost)
MAX_HOST_RUNS_PER_TOOL = 1000  # most recent CPU latencies and loads kept per unit tool (bounds memory)


def unit_of(tool: str, repeat: int) -> tuple[str, int]:
    """(unit tool, K): ``clip_x12`` x 2 -> (``clip``, 24)."""
    m = _AMPLIFIED.match(tool)
    if m is None:
        return tool, repeat
    return m.group("base"), int(m.group("k")) * repeat


@dataclass(frozen=True)
class UnitPrior:
    """What the planner assumes of one unit tool before any run."""

    has_gpu: bool  # a GPU implementation exists (warm: the card; cold: no 'no-gpu' tag)
    log_cpu_ms: float  # prior mean of log unit CPU latency
    log_cpu_sd: float
    log_gpu_ms: float  # prior mean of log unit GPU latency
    log_gpu_sd: float
    log_load_ms: float  # prior mean of log load time
    log_load_sd: float
    vram_mb: float | None  # VRAM held on the GPU (None: unknown until seen, cold start)
    log_s: float  # prior mean of log sensitivity
    log_p: float  # prior mean of log pressure


def warm_prior(card: ToolCard, k: int) -> UnitPrior:
    """Prior of a unit from a warm-start card of K calls: its figures, a little uncertain."""
    s, p = pr.contention_prior(card.tags)
    gpu = (card.gpu_ms / k) if card.gpu_ms is not None else card.cpu_ms / k
    return UnitPrior(
        card.has_gpu,
        math.log(card.cpu_ms / k),
        pr.CARD_LOG_SIGMA,
        math.log(gpu),
        pr.CARD_LOG_SIGMA,
        math.log(max(card.load_needed_ms, 1e-3)),
        pr.CARD_LOG_SIGMA,
        card.vram_needed_mb,
        math.log(s),
        math.log(p),
    )


def cold_prior(tags: Iterable[str]) -> UnitPrior:
    """Prior of a unit known by its tags only: latencies unknown (wide), speedup guessed by tag."""
    tags = tuple(tags)
    s, p = pr.contention_prior(tags)
    cpu = math.log(1000.0)
    return UnitPrior(
        not pr.host_only(tags),
        cpu,
        pr.COLD_LOG_SIGMA,
        cpu - math.log(pr.speedup_prior(tags)),
        pr.COLD_LOG_SIGMA,
        math.log(1000.0),
        pr.COLD_LOG_SIGMA,
        None,
        math.log(s),
        math.log(p),
    )


@dataclass(frozen=True)
class Fit:
    """A fitted model: posterior mean and covariance of the GPU parameters, point estimates else."""

    gpu_units: tuple[str, ...]  # units with a GPU implementation, in theta order
    theta: np.ndarray  # [log g, log s, log p] per GPU unit, flattened
    cov: np.ndarray  # posterior covariance of theta
    log_cpu_ms: dict[str, float]  # unit -> posterior mean of log unit CPU latency
    log_load_ms: dict[str, float]  # unit -> posterior mean of log load time
    vram_mb: dict[str, float]  # unit -> VRAM (card, else largest seen, else a guess)
    noise_sigma: float  # estimated log-latency noise
    gpu_runs: int  # GPU runs the fit used

    def sd(self) -> np.ndarray:
        return np.sqrt(np.maximum(np.diag(self.cov), 0.0))

    def contention(self, unit: str) -> tuple[float, float, float, float]:
        """(s, p, sd of log s, sd of log p) of a GPU unit."""
        i = self.gpu_units.index(unit)
        sd = self.sd()
        return (
            math.exp(self.theta[3 * i + 1]),
            math.exp(self.theta[3 * i + 2]),
            float(sd[3 * i + 1]),
            float(sd[3 * i + 2]),
        )


VRAM_FLOOR_STEP_MB = 1.0  # a tool known to need more than F MB is planned at F + this


class PlanModel:
    """Observations of one workflow's tools and the fit over them."""

    def __init__(
        self, workflow: Workflow, priors: Mapping[str, UnitPrior], units: Mapping[str, tuple[str, int]]
    ) -> None:
        self.workflow = workflow
        self.priors = dict(priors)  # unit -> prior
        self.unit = {t: units[t][0] for t in workflow.task_ids}  # task -> unit tool
        self.k = {t: units[t][1] for t in workflow.task_ids}  # task -> calls per task
        self.gpu_units = tuple(u for u, p in self.priors.items() if p.has_gpu)
        self._col = {u: i for i, u in enumerate(self.gpu_units)}
        # unit -> log unit CPU latencies / log loads, the most recent ones (bounded like the GPU runs)
        self.cpu_logs: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=MAX_HOST_RUNS_PER_TOOL))
        self.load_logs: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=MAX_HOST_RUNS_PER_TOOL))
        self.vram_seen: dict[str, float] = {}  # unit -> largest VRAM seen
        self.vram_floor: dict[str, float] = {}  # unit -> its real VRAM is above this (an OOM showed it)
        self.gpu_runs: dict[str, deque[GpuRun]] = defaultdict(lambda: deque(maxlen=MAX_GPU_RUNS_PER_TOOL))
        self._theta: np.ndarray | None = None  # last MAP (warm start of the next fit)
        self._fit: Fit | None = None

    @classmethod
    def for_workflow(
        cls, workflow: Workflow, cards: Mapping[str, ToolCard] | None, tags: Mapping[str, tuple[str, ...]]
    ) -> PlanModel:
        """Warm start (``cards`` given) or cold start (tags only)."""
        units = {t: unit_of(workflow.tasks[t].tool, workflow.tasks[t].repeat) for t in workflow.task_ids}
        priors: dict[str, UnitPrior] = {}
        for t in workflow.task_ids:
            u, k = units[t]
            if u in priors:
                continue
            priors[u] = warm_prior(cards[t], k) if cards is not None else cold_prior(tags[t])
        return cls(workflow, priors, units)

    def has_gpu(self, task: str) -> bool:
        return self.priors[self.unit[task]].has_gpu

    # ---- data ------------------------------------------------------------------------------
    def add(self, obs: ExecutionObservations) -> None:
        """Record one execution's observations (the next ``fit`` uses them)."""
        for t, ms in obs.cpu_ms:
            if ms > 0:
                self.cpu_logs[self.unit[t]].append(math.log(ms / self.k[t]))
        for t, ms in obs.load_ms:
            if ms > 0:
                self.load_logs[self.unit[t]].append(math.log(ms))
        for t, mb in obs.vram_mb:
            u = self.unit[t]
            self.vram_seen[u] = max(self.vram_seen.get(u, 0.0), mb)
        for run in obs.gpu:
            if run.run_ms > 0 and self.has_gpu(run.task):
                self.gpu_runs[self.unit[run.task]].append(run)
        self._fit = None

    def learn_vram_floor(self, task: str, floor_mb: float) -> bool:
        """An OOM showed ``task``'s tool needs more than ``floor_mb``; True when that raises its estimate."""
        u = self.unit[task]
        if floor_mb <= max(self.vram_seen.get(u, 0.0), self.vram_floor.get(u, 0.0), self.priors[u].vram_mb or 0.0):
            return False
        self.vram_floor[u] = floor_mb
        self._fit = None
        return True

    def forget_gpu_runs(self) -> None:
        """The machine changed (a detected change): the GPU runs seen so far describe another machine's
        contention; latencies on the CPU and loads are kept."""
        self.gpu_runs.clear()
        self._theta = None
        self._fit = None

    # ---- fit -------------------------------------------------------------------------------
    def fit(self) -> Fit:
        if self._fit is None:
            self._fit = self._compute()
        return self._fit

    def _noise_sigma(self) -> float:
        devs: list[float] = []
        for logs in self.cpu_logs.values():
            if len(logs) > 1:
                m = sum(logs) / len(logs)
                devs.extend((x - m) ** 2 * len(logs) / (len(logs) - 1) for x in logs)
        if len(devs) < 5:
            return DEFAULT_NOISE_SIGMA
        return min(0.5, max(0.01, math.sqrt(sum(devs) / len(devs))))

    def _compute(self) -> Fit:
        sigma = self._noise_sigma()
        log_cpu = {
            u: _conjugate(p.log_cpu_ms, p.log_cpu_sd, self.cpu_logs.get(u, ()), sigma) for u, p in self.priors.items()
        }
        log_load = {
            u: _conjugate(p.log_load_ms, p.log_load_sd, self.load_logs.get(u, ()), sigma)
            for u, p in self.priors.items()
        }
        vram = {}
        for u, p in self.priors.items():
            seen = self.vram_seen.get(u)
            if p.vram_mb is None:
                vram[u] = seen if seen is not None else _vram_guess(self)
            else:  # a tool seen holding more than its card says is planned at what it held
                vram[u] = max(p.vram_mb, seen or 0.0)
            if u in self.vram_floor:  # needs more than an OOM left it: planned just above that
                vram[u] = max(vram[u], self.vram_floor[u] + VRAM_FLOOR_STEP_MB)
        mu0, sd0 = self._gpu_prior(log_cpu)
        runs = [r for u in self.gpu_units for r in self.gpu_runs.get(u, ())]
        theta0 = self._theta if self._theta is not None and len(self._theta) == len(mu0) else mu0.copy()
        theta, cov = _map_fit(self, runs, mu0, sd0, theta0, sigma)
        self._theta = theta
        for i, u in enumerate(self.gpu_units):
            p = self.priors[u]
            if p.log_cpu_sd >= pr.COLD_LOG_SIGMA and not self.cpu_logs.get(u):
                # cold start, never run on the CPU: the GPU estimate times the tag's speedup
                log_cpu[u] = float(theta[3 * i]) + (p.log_cpu_ms - p.log_gpu_ms)
        return Fit(self.gpu_units, theta, cov, log_cpu, log_load, vram, sigma, len(runs))

    def _gpu_prior(self, log_cpu: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        mu, sd = [], []
        for u in self.gpu_units:
            p = self.priors[u]
            g = p.log_gpu_ms
            if p.log_gpu_sd >= pr.COLD_LOG_SIGMA:  # cold: follow the CPU estimate with the tag's speedup
                g = log_cpu[u] + (p.log_gpu_ms - p.log_cpu_ms)
            mu += [g, p.log_s, p.log_p]
            sd += [p.log_gpu_sd, pr.PRIOR_LOG_SIGMA, pr.PRIOR_LOG_SIGMA]
        return np.array(mu, dtype=float), np.array(sd, dtype=float)

    # ---- the model as numbers ----------------------------------------------------------------
    def params(self, fit: Fit | None = None, theta: np.ndarray | None = None) -> dict[str, TaskParams]:
        """Per-task figures for the predictor: the posterior mean, or a given theta (a sample)."""
        fit = fit or self.fit()
        th = fit.theta if theta is None else theta
        out = {}
        for t in self.workflow.task_ids:
            u, k = self.unit[t], self.k[t]
            cpu = k * math.exp(fit.log_cpu_ms[u])
            if u in self._col:
                i = 3 * self._col[u]
                out[t] = TaskParams(
                    cpu,
                    k * math.exp(th[i]),
                    math.exp(fit.log_load_ms[u]),
                    fit.vram_mb[u],
                    math.exp(th[i + 1]),
                    math.exp(th[i + 2]),
                )
            else:
                out[t] = TaskParams(cpu, None, 0.0, 0.0, 0.0, 0.0)
        return out

    def samples(
        self,
        n: int,
        rng: np.random.Generator,
        fit: Fit | None = None,
        changed: Mapping[str, float] | None = None,
        shift_sd: float = 0.0,
    ) -> list[dict[str, TaskParams]]:
        """``n`` draws of the per-task figures from the posterior (Laplace) of the GPU parameters. Stale
        figures: with probability ``changed[unit]`` a draw shifts that unit's three log-parameters by
        N(0, ``shift_sd``) each (the machine may have changed since the unit was last seen on the GPU)."""
        fit = fit or self.fit()
        if not len(fit.theta):
            return [self.params(fit) for _ in range(n)]
        try:
            chol = np.linalg.cholesky(fit.cov + 1e-12 * np.eye(len(fit.theta)))
        except np.linalg.LinAlgError:
            chol = np.diag(fit.sd())
        z = rng.standard_normal((n, len(fit.theta)))
        thetas = fit.theta + z @ chol.T
        if changed and shift_sd > 0:
            p = np.array([changed.get(u, 0.0) for u in fit.gpu_units])
            moved = np.repeat(rng.random((n, len(p))) < p, 3, axis=1)
            thetas = thetas + moved * rng.standard_normal(thetas.shape) * shift_sd
        return [self.params(fit, th) for th in thetas]


def _conjugate(mu0: float, sd0: float, xs: Iterable[float], sigma: float) -> float:
    """Posterior mean of a normal mean with prior N(mu0, sd0^2) after samples with noise sigma."""
    xs = list(xs)
    if not xs:
        return mu0
    prec = 1 / sd0**2 + len(xs) / sigma**2
    return (mu0 / sd0**2 + sum(xs) / sigma**2) / prec


def _vram_guess(model: PlanModel) -> float:
    """Cold start, a tool never seen on the GPU: the median VRAM seen so far, else a modest guess."""
    seen = sorted(model.vram_seen.values())
    if seen:
        return seen[len(seen) // 2]
    budget = model.workflow.vram_budget_mb
    return budget / 4 if budget else 500.0


@dataclass
class _Design:
    """The GPU runs as arrays: one row per segment."""

    d: np.ndarray  # segment durations
    counts: np.ndarray  # segments x GPU units: how many tasks of each unit ran beside
    seg_run: np.ndarray  # segment -> run index
    run_unit: np.ndarray  # run -> GPU unit column
    log_k: np.ndarray  # run -> log K


def _design(model: PlanModel, runs: list[GpuRun]) -> _Design:
    d, rows, seg_run = [], [], []
    col = model._col
    for i, run in enumerate(runs):
        for dur, others in run.segments:
            d.append(dur)
            seg_run.append(i)
            rows.append([col[model.unit[o]] for o in others if model.unit[o] in col])
    counts = np.zeros((len(d), len(col)))
    for r, cols in enumerate(rows):
        for c in cols:
            counts[r, c] += 1
    return _Design(
        np.array(d, dtype=float),
        counts,
        np.array(seg_run, dtype=int),
        np.array([col[model.unit[r.task]] for r in runs], dtype=int),
        np.array([math.log(model.k[r.task]) for r in runs], dtype=float),
    )


def _residuals(des: _Design, theta: np.ndarray, n_runs: int, want_jac: bool):
    g = theta[0::3]
    s = np.exp(theta[1::3])
    p = np.exp(theta[2::3])
    su = s[des.run_unit][des.seg_run]  # sensitivity of each segment's run
    press = des.counts @ p  # foreign pressure per segment
    denom = 1.0 + su * press
    w_seg = des.d / denom
    w = np.bincount(des.seg_run, weights=w_seg, minlength=n_runs)
    w = np.maximum(w, 1e-12)
    res = np.log(w) - des.log_k - g[des.run_unit]
    if not want_jac:
        return res, None
    nu = len(g)
    jac = np.zeros((n_runs, 3 * nu))
    rows = np.arange(n_runs)
    jac[rows, 3 * des.run_unit] = -1.0
    # d log W / d log s = s * sum_k (-d_k P_k / denom^2) / W
    ds = np.bincount(des.seg_run, weights=-des.d * press / denom**2, minlength=n_runs)
    jac[rows, 3 * des.run_unit + 1] = s[des.run_unit] * ds / w
    # d log W / d log p_j = p_j * sum_k (-d_k s n_kj / denom^2) / W
    coef = -des.d * su / denom**2  # per segment
    dp = np.zeros((n_runs, nu))
    np.add.at(dp, des.seg_run, coef[:, None] * des.counts)
    jac[:, 2::3] = dp * p[None, :] / w[:, None]
    return res, jac


def _map_fit(
    model: PlanModel,
    runs: list[GpuRun],
    mu0: np.ndarray,
    sd0: np.ndarray,
    theta0: np.ndarray,
    sigma: float,
    iters: int = 30,
) -> tuple[np.ndarray, np.ndarray]:
    """MAP of theta under the prior and the runs (Levenberg-Marquardt); covariance = inverse Hessian."""
    prior_prec = 1.0 / sd0**2
    if not runs or not len(mu0):
        return mu0.copy(), np.diag(sd0**2)
    des = _design(model, runs)
    n = len(runs)

    def objective(th: np.ndarray) -> float:
        r, _ = _residuals(des, th, n, False)
        return float(np.sum(r**2) / sigma**2 + np.sum(prior_prec * (th - mu0) ** 2))

    theta = theta0.copy()
    lam = 1e-2
    cur = objective(theta)
    for _ in range(iters):
        r, jac = _residuals(des, theta, n, True)
        h = jac.T @ jac / sigma**2 + np.diag(prior_prec)
        grad = jac.T @ r / sigma**2 + prior_prec * (theta - mu0)
        improved = False
        for _ in range(8):
            try:
                step = np.linalg.solve(h + lam * np.diag(np.diag(h)), grad)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            cand = np.clip(theta - step, mu0 - 8.0, mu0 + 8.0)  # why: keep exp() finite on wild steps
            val = objective(cand)
            if val < cur:
                theta, cur, lam, improved = cand, val, max(lam / 3, 1e-7), True
                break
            lam *= 10
        if not improved or np.max(np.abs(step)) < 1e-6:
            break
    _, jac = _residuals(des, theta, n, True)
    h = jac.T @ jac / sigma**2 + np.diag(prior_prec)
    try:
        cov = np.linalg.inv(h)
    except np.linalg.LinAlgError:
        cov = np.diag(sd0**2)
    return theta, cov
