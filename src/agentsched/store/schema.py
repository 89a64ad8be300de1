"""The store's schema: its tables, its version, and what a store file may hold besides them.

Tables (schema version ``SCHEMA_VERSION``, recorded in ``schema_version``):

* ``workflows`` (content hash -> name, JSON) and ``card_sets`` (hash of the cards a policy sees ->
  JSON): what a learner is keyed by;
* ``learners``: one per (workflow hash, card hash, policy, settings): its id and key;
* ``executions``: every execution of a learner, append-only: its place ``seq`` in the learner's
  sequence (NULL for an execution another process had already recorded at that place), kind
  (round run or probe), round, mapping, status, E2E, message and the full record (per-task
  timings) at full float precision;
* ``rounds``: one row per observed round (mapping, status, median E2E, what the policy said);
* ``contention``: the load-aware planner's learned (s, p) and measured ratio per unit tool and card,
  replaced on save (``store/contention.py``);
* ``unwritten_taken``: the files of records kept aside that the store has taken (``store/unwritten.py``).

agentsched creates no trigger and no view. A store that holds one was made or changed by something
else, and is refused at open: a trigger runs on every write (one that deletes each inserted row loses
history silently), and a view can be made to run forever (a recursive one standing in for a table).
"""

from __future__ import annotations

import sqlite3

from agentsched.store.contention import CONTENTION_TABLE

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS card_sets (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS learners (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, workflow_hash TEXT NOT NULL,
    workflow_name TEXT NOT NULL, card_hash TEXT NOT NULL, policy TEXT NOT NULL,
    settings TEXT NOT NULL, created_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, learner_id INTEGER NOT NULL REFERENCES learners(id),
    seq INTEGER, kind TEXT NOT NULL, round INTEGER, mapping TEXT NOT NULL, status TEXT NOT NULL,
    e2e_ms REAL, message TEXT NOT NULL, record TEXT NOT NULL, pid INTEGER NOT NULL,
    created_s REAL NOT NULL, UNIQUE (learner_id, seq));
CREATE TABLE IF NOT EXISTS rounds (
    learner_id INTEGER NOT NULL REFERENCES learners(id), round INTEGER NOT NULL,
    mapping TEXT NOT NULL, status TEXT NOT NULL, e2e_ms REAL, executions_after INTEGER NOT NULL,
    reason TEXT NOT NULL, created_s REAL NOT NULL, PRIMARY KEY (learner_id, round));
"""
SCHEMA += CONTENTION_TABLE + ";\n"

FOREIGN_KINDS = ("trigger", "view")  # objects agentsched never creates (module docstring)


def create(conn: sqlite3.Connection) -> None:
    """Create the schema in an empty store (one transaction; a no-op when another process did first)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        present = conn.execute("SELECT name FROM sqlite_master WHERE name = 'schema_version'").fetchone()
        if present is None:  # another process may have created it while we waited
            for stmt in filter(None, (s.strip() for s in SCHEMA.split(";"))):
                conn.execute(stmt)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def foreign_objects(conn: sqlite3.Connection) -> str | None:
    """What the store holds that agentsched never creates (triggers, views), named in one phrase; None if nothing."""
    marks = ", ".join("?" * len(FOREIGN_KINDS))
    rows = conn.execute(
        f"SELECT type, name FROM sqlite_master WHERE type IN ({marks}) ORDER BY type, name", FOREIGN_KINDS
    ).fetchall()
    if not rows:
        return None
    named = ", ".join(f"{kind} {name!r}" for kind, name in rows[:5])
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return f"{named}{more}"


def version_problem(conn: sqlite3.Connection) -> str | None:
    """Why the store's recorded schema version cannot be used; None when it can."""
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    version = row[0] if row else None
    if version is None:
        return "has no schema version (not an agentsched store, or corrupt)"
    if not isinstance(version, int):
        return f"has a schema version that is not a number ({str(version)[:40]!r})"
    if version > SCHEMA_VERSION:
        return (
            f"has schema version {version}, newer than this agentsched's {SCHEMA_VERSION}: upgrade agentsched to use it"
        )
    if version < SCHEMA_VERSION:  # no older schema exists yet; a migration would go here
        return f"has unknown old schema version {version}"
    return None
