"""The cut at shutdown: an invocation still running when the drain's time is up is recorded as
``error`` (kind ``cut``, outside the learner's sequence) and answered with that record."""

from __future__ import annotations

import logging
import time

from agentsched.errors import AgentschedError
from agentsched.model.execution import Execution, Status
from agentsched.runtime import Runtime
from agentsched.runtime.runtime import InvokeResult
from agentsched.service.admission import Flight
from agentsched.store import unwritten
from agentsched.store.store import Store

log = logging.getLogger("agentsched.service")

CUT_MESSAGE = "cut by shutdown after drain-s"
SECOND_SIGNAL_MESSAGE = "cut by a second shutdown signal"
CUT_GRACE_S = 0.5  # after the loops stop: how long an invocation already answered may take to say so


def record_cut(rt: Runtime, store: Store, flight: Flight, message: str) -> InvokeResult:
    """Record ``flight`` of ``rt`` as cut (kept on disk for the next open when the store fails now)
    and return its answer."""
    elapsed_ms = (time.monotonic() - flight.started_s) * 1000.0
    # the mapping it ran under is the dispatcher's, not known here: recorded as none
    x = Execution(
        status=Status.ERROR,
        mapping={},
        e2e_ms=None,
        elapsed_ms=elapsed_ms,
        peak_vram_mb=0.0,
        spans=(),
        message=message,
        testbed=rt.testbed.name,
    )
    invocation_id = None
    if rt.learner_id is not None:
        try:
            invocation_id, _ = store.append(rt.learner_id, None, "cut", None, x)
        except AgentschedError as e:  # the store failing now: kept on disk for the next open, and said
            kept = unwritten.execution_record(rt.learner_key, None, "cut", None, x)
            where = unwritten.keep(store.path, [kept])
            log.error(
                "could not record a cut invocation of %s now (%s): %s",
                flight.name,
                e,
                f"kept in {where}; the next store opened at that path writes it" if where else "lost",
            )
    return InvokeResult(
        outputs={},
        mapping={},
        e2e_ms=None,
        timeline=(),
        status=Status.ERROR,
        message=message,
        invocation_id=invocation_id,
        kind="cut",
        round=None,
    )
