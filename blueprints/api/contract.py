"""The backoffice JSON API's OpenAPI document, served at ``/api/v1/backoffice/openapi.json``.

The shapes are README's "JSON output" (``taskrunner.reports``), shared with ``tasks status --json``.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from blueprints.backoffice.console import SEARCH_SECTIONS
from blueprints.openapi import (
    DATE_TIME,
    UUID,
    Document,
    Link,
    Operation,
    Param,
    Reply,
    array,
    closed,
    nullable,
    ref,
)
from blueprints.params import BIGINT, MAX_REASON, MAX_TEXT
from taskrunner.contract import operations

PREFIX = "/api/v1/backoffice/"
EXAMPLE_RUN = "9ae2ab2c-fae6-4d40-ae01-7efebf6a42d2"
EXAMPLE_OTHER_RUN = "4c1d2e3f-0a1b-4c2d-8e3f-5a6b7c8d9e0f"
STALE_REASONS = ["worker lost", "running too long", "never started"]
# What an operator types is refused with a 400 when it holds control characters.
TEXT = {"type": "string", "maxLength": MAX_TEXT, "pattern": "^[^\\u0000-\\u001f]*$"}
CURSOR_TEXT = {**TEXT, "maxLength": MAX_TEXT + 40}
# A reason keeps the newlines and tabs of the message it was made from.
REASON_TEXT = {**TEXT, "maxLength": MAX_REASON, "pattern": "^[^\\u0000-\\u0008\\u000b-\\u001f]*$"}
RUN_STATUS = {"type": "string", "enum": list(operations.RUN_STATUSES)}
UNIT_STATUS = {"type": "string", "enum": list(operations.UNIT_STATUSES)}
COUNT = {"type": "integer", "minimum": 0}
FAILURE_KINDS = ["crash", "vendor", "domain", "expired"]
FRAME = closed(
    {
        "file": {"type": "string", "description": "Relative to the project or its library."},
        "line": nullable({"type": "integer"}),
        "function": {"type": "string"},
        "own": {"type": "boolean", "description": "The project's own code, not a library's."},
    }
)


def limit(default: int, maximum: int) -> Param:
    return Param(
        "limit",
        f"Items per page, 1 to {maximum} (default {default}).",
        {"type": "integer", "minimum": 1, "maximum": maximum, "default": default},
    )


CURSOR = Param(
    "cursor",
    "`next_cursor` of the previous page, with the same filters; a cursor naming nothing is a 400.",
    CURSOR_TEXT,
)
RUN_UUID = Param("run_uuid", "The run's uuid; a malformed one is a 404.", UUID, EXAMPLE_RUN)

UNIT = {
    "unit_key": {"type": "string"},
    "tenant_id": nullable({"type": "integer"}),
    "status": UNIT_STATUS,
    "attempts": COUNT,
    "last_error": nullable({"type": "string", "description": "Redacted."}),
    "kind": nullable(
        {
            "type": "string",
            "enum": FAILURE_KINDS,
            "description": "A failed unit's kind of failure (null for a unit that did not "
            "fail): crash, a bug in the task, met again until the code changes; vendor, a "
            "driver, network or timeout error, often transient; domain, the task's own "
            "refusal, met again until the data changes; expired, never ran in time.",
        }
    ),
    "started_at": nullable(DATE_TIME),
    "finished_at": nullable(DATE_TIME),
    "stale": {"type": "boolean"},
    "stale_reason": nullable({"type": "string", "enum": STALE_REASONS}),
}
UNIT_EXAMPLE = {
    "unit_key": "probe-7",
    "tenant_id": None,
    "status": "failed",
    "attempts": 1,
    "last_error": "unhandled sqlalchemy.exc.OperationalError — see logs",
    "kind": "vendor",
    "started_at": "2026-11-29T10:41:52Z",
    "finished_at": "2026-11-29T10:41:52Z",
    "stale": False,
    "stale_reason": None,
}
RUN = {
    "uuid": UUID,
    "type": {"type": "string"},
    "status": RUN_STATUS,
    "initiator": {"type": "string"},
    "started_at": DATE_TIME,
    "finished_at": nullable(DATE_TIME),
    "units": ref("UnitCounts"),
}
RUN_EXAMPLE = {
    "uuid": EXAMPLE_RUN,
    "type": "diagnostics.probe",
    "status": "completed_with_failures",
    "initiator": "cli",
    "started_at": "2026-11-29T10:41:52Z",
    "finished_at": "2026-11-29T10:41:55Z",
    "units": {
        "total": 1000,
        "pending": 0,
        "running": 0,
        "completed": 772,
        "failed": 228,
        "skipped": 0,
        "stale": 0,
    },
}


SLOT_STATES = [
    "ok",
    "completed_with_failures",
    "failed",
    "running",
    "late",
    "missed",
    "paused",
]
SCHEDULE_NAME = Param(
    "name", "The schedule's name; one that names no schedule is a 404.", TEXT, "taskrunner.prune"
)
SLOT_EXAMPLE = {
    "slot_at": "2026-11-29T03:17:00Z",
    "state": "ok",
    "host": "worker-1:4242",
    "claimed_at": "2026-11-29T03:17:01Z",
    "finished_at": "2026-11-29T03:17:09Z",
    "initiator": "schedule",
    "reason": None,
}
SCHEDULE_EXAMPLE = {
    "name": "taskrunner.prune",
    "starts": "job taskrunner.prune",
    "rule": "daily at 03:17 UTC",
    "expression": "17 3 * * *",
    "timezone": "UTC",
    "grace_seconds": 300,
    "paused": False,
    "paused_by": None,
    "paused_at": None,
    "next_due_at": "2026-11-30T03:17:00Z",
    "first_known_at": "2026-11-01T09:00:00Z",
    "last_slot": SLOT_EXAMPLE,
    "slots": [SLOT_EXAMPLE],
    "missed": 0,
    "missed_since": None,
}


def page_of(schema: str) -> dict[str, Any]:
    return closed({"units": array(ref(schema)), "next_cursor": nullable({"type": "string"})})


SCHEMAS: dict[str, Any] = {
    "ScheduleSlot": closed(
        {
            "slot_at": DATE_TIME,
            "state": {"type": "string", "enum": SLOT_STATES},
            "host": nullable({"type": "string"}),
            "claimed_at": nullable(DATE_TIME),
            "finished_at": nullable(DATE_TIME),
            "initiator": nullable({"type": "string"}),
            "reason": nullable({"type": "string", "description": "Redacted."}),
            "run_uuid": UUID,
        },
        optional=("run_uuid",),
    ),
    "Schedule": closed(
        {
            "name": {"type": "string"},
            "starts": {"type": "string"},
            "rule": {"type": "string"},
            "expression": {"type": "string"},
            "timezone": {"type": "string"},
            "grace_seconds": COUNT,
            "paused": {"type": "boolean"},
            "paused_by": nullable({"type": "string"}),
            "paused_at": nullable(DATE_TIME),
            "next_due_at": nullable(DATE_TIME),
            "first_known_at": nullable(DATE_TIME),
            "last_slot": nullable(ref("ScheduleSlot")),
            "slots": array(ref("ScheduleSlot")),
            "missed": {**COUNT, "description": "Slots missed in the last 24 hours."},
            "missed_since": nullable(DATE_TIME),
        }
    ),
    "Schedules": closed({"schedules": array(ref("Schedule"))}),
    "UnitCounts": closed(
        {
            name: COUNT
            for name in ("total", "pending", "running", "completed", "failed", "skipped", "stale")
        }
    ),
    "Run": closed(RUN),
    "RunPage": closed({"runs": array(ref("Run")), "next_cursor": nullable(UUID)}),
    "Event": closed(
        {
            "id": UUID,
            "name": {"type": "string", "enum": operations.event_names()},
            "at": DATE_TIME,
            "payload": {"type": "object", "description": "Primitives only (docs/EVENTS.md)."},
        }
    ),
    "RunDetail": closed(
        {
            **RUN,
            "failed_units": array(ref("Unit")),
            "stale_units": array(ref("Unit")),
            "events": array(ref("Event")),
        }
    ),
    "Unit": closed(UNIT),
    "UnitDetail": closed(
        {
            **UNIT,
            "queued_at": nullable(DATE_TIME),
            "heartbeat_at": nullable(DATE_TIME),
            "stuck_notified_at": nullable(DATE_TIME),
            "created_at": nullable(DATE_TIME),
            "stack": {
                **array(FRAME),
                "description": "The last failure's frames, innermost last (a failed unit "
                "only): no locals, no message.",
            },
        }
    ),
    "UnitPage": page_of("Unit"),
    "StaleUnit": closed(
        {
            **UNIT,
            "run_uuid": UUID,
            "type": {"type": "string"},
            "heartbeat_at": nullable(DATE_TIME),
            "queued_at": nullable(DATE_TIME),
        }
    ),
    "StaleUnitPage": page_of("StaleUnit"),
    "UnitHistory": closed(
        {**UNIT, "run_uuid": UUID, "type": {"type": "string"}, "run_status": RUN_STATUS}
    ),
    "UnitHistoryPage": page_of("UnitHistory"),
    "ErrorGroups": closed(
        {
            "uuid": UUID,
            "groups": array(
                closed(
                    {
                        "reason": {
                            "type": "string",
                            "description": "Numbers and identifiers folded into `#`.",
                        },
                        "kind": {
                            "type": "string",
                            "enum": FAILURE_KINDS,
                            "description": "crash: a bug in the task, met again until the "
                            "code changes; vendor: a driver, network or timeout error, worth "
                            "a retry; domain: the module's own refusal, met again until the "
                            "data changes; expired: never ran in time.",
                        },
                        "where": nullable(
                            {
                                "type": "string",
                                "description": "The innermost frame of the project's own "
                                "code: `payments/statements.py:88 in generate`.",
                            }
                        ),
                        "example": {"type": "string"},
                        "count": {**COUNT, "description": "Failed units of the group."},
                        "retrying": {
                            **COUNT,
                            "description": "Units of the group retried and not settled yet.",
                        },
                        "tenants": COUNT,
                        "tenant_sample": array({"type": "integer"}),
                    }
                )
            ),
            "next_cursor": nullable(
                {
                    **REASON_TEXT,
                    "description": "The last group's reason: pass it as `cursor` for the "
                    "next groups; null on the last page.",
                }
            ),
        }
    ),
    "CompareUnit": closed(
        {
            **UNIT,
            "previous_status": nullable(
                {**UNIT_STATUS, "description": "In the other run; null: not in it."}
            ),
            "previous_error": nullable({"type": "string", "description": "Redacted."}),
            "failing_runs": nullable(
                {
                    **COUNT,
                    "description": "Still failing units: runs of the type in a row, up to "
                    "this one, the unit failed in (30 at most are read).",
                }
            ),
        }
    ),
    "Comparison": closed(
        {
            "uuid": UUID,
            "with": UUID,
            "type": {"type": "string"},
            **{
                name: closed(
                    {"count": COUNT, "units": {**array(ref("CompareUnit")), "maxItems": 50}}
                )
                for name in ("newly_failing", "recovered", "still_failing")
            },
            "new_error_groups": array(
                closed(
                    {
                        "reason": {"type": "string"},
                        "kind": {"type": "string", "enum": FAILURE_KINDS},
                        "where": nullable({"type": "string"}),
                        "count": COUNT,
                    }
                )
            ),
            "new_error_groups_count": {
                **COUNT,
                "description": "Every new error group; `new_error_groups` lists the 50 biggest.",
            },
            "duration_seconds": closed(
                {
                    "run": {"type": "number"},
                    "with": {"type": "number"},
                    "change": {"type": "number"},
                }
            ),
            "throughput_per_minute": closed(
                {"run": nullable({"type": "number"}), "with": nullable({"type": "number"})}
            ),
        }
    ),
    "RunningUnit": closed(
        {
            "unit_key": {"type": "string"},
            "tenant_id": nullable({"type": "integer"}),
            "status": UNIT_STATUS,
            "run_uuid": UUID,
            "type": {"type": "string"},
        }
    ),
    "Consumers": closed(
        {
            "consumers": array(
                closed(
                    {
                        "id": {"type": "string"},
                        "host": {"type": "string"},
                        "pid": COUNT,
                        "queues": array({"type": "string"}),
                        "worker_type": {"type": "string"},
                        "workers": COUNT,
                        "started_at": DATE_TIME,
                        "heartbeat_at": DATE_TIME,
                        "heartbeat_age_seconds": COUNT,
                        "state": {"type": "string", "enum": ["live", "lost"]},
                        "worker_deaths": {
                            **COUNT,
                            "description": "Process workers found dead (and restarted).",
                        },
                        "deaths": array(
                            closed(
                                {
                                    "at": nullable(DATE_TIME),
                                    "pid": nullable(COUNT),
                                    "task_id": nullable({"type": "string"}),
                                    "unit": nullable(ref("RunningUnit")),
                                }
                            )
                        ),
                        "running": array(
                            closed(
                                {
                                    "pid": COUNT,
                                    "task": {"type": "string"},
                                    "task_id": {"type": "string"},
                                    "since": nullable(DATE_TIME),
                                    "elapsed_seconds": nullable(COUNT),
                                    "unit": nullable(ref("RunningUnit")),
                                }
                            )
                        ),
                    }
                )
            )
        }
    ),
    "Queues": closed(
        {
            "queues": array(
                closed(
                    {
                        "name": {"type": "string"},
                        "waiting": nullable(
                            {**COUNT, "description": "Huey's own count; null if unreachable."}
                        ),
                        "pending_units": COUNT,
                        "oldest_pending_at": nullable(DATE_TIME),
                        "oldest_pending_seconds": nullable(COUNT),
                        "running": COUNT,
                        "completed_last_minute": COUNT,
                        "failed_last_minute": COUNT,
                        "completed_last_hour": COUNT,
                        "failed_last_hour": COUNT,
                        "types": array(
                            closed(
                                {
                                    "type": {"type": "string"},
                                    "registered": {"type": "boolean"},
                                    "pending_units": COUNT,
                                    "running": COUNT,
                                    "paused": {"type": "boolean"},
                                    "paused_at": nullable(DATE_TIME),
                                    "paused_by": nullable({"type": "string"}),
                                }
                            )
                        ),
                    }
                )
            ),
            "paused_types": array({"type": "string"}),
            "settled_as_of": nullable(
                {
                    **DATE_TIME,
                    "description": "End of the last minute rolled up (every minute by a "
                    "periodic task); the last minute and hour counts end there.",
                }
            ),
            "settled_lag_seconds": nullable(COUNT),
        }
    ),
    "SearchResults": closed(
        {
            "query": {"type": "string"},
            "exact_run": nullable(UUID),
            "runs": array(ref("Run")),
            "tenants": array(
                closed(
                    {
                        "id": {"type": "integer"},
                        "name": {"type": "string"},
                        "status": {"type": "string"},
                        "created_at": DATE_TIME,
                    }
                )
            ),
            "units": array(ref("UnitHistory")),
            "errors": array(ref("UnitHistory")),
            "counts": closed(
                {
                    name: {**COUNT, "maximum": 1000}
                    for name in ("tenants", "runs", "units", "errors")
                },
            ),
            "section": nullable({"type": "string", "enum": list(SEARCH_SECTIONS)}),
            "page": {"type": "integer", "minimum": 1, "maximum": 50},
        }
    ),
    "OpenApiDocument": {"type": "object", "required": ["openapi", "info", "paths"]},
}

RUN_LINKS = {
    name: Link(operation_id, {"run_uuid": "$response.body#/runs/0/uuid"}, description)
    for name, operation_id, description in (
        ("first_run", "getRun", "The first run of the page."),
        ("first_run_units", "listRunUnits", "The units of the first run of the page."),
        ("first_run_errors", "getRunErrors", "The error groups of the first run of the page."),
        ("first_run_compared", "compareRuns", "The first run of the page against its previous."),
    )
}
SAME_RUN = {
    name: Link(operation_id, {"run_uuid": "$request.path.run_uuid"}, description)
    for name, operation_id, description in (
        ("units", "listRunUnits", "Every unit of this run."),
        ("errors", "getRunErrors", "This run's failed units grouped by reason."),
    )
}
LISTED_UNIT = {
    "first_unit": Link(
        "getRunUnit",
        {
            "path.run_uuid": "$response.body#/units/0/run_uuid",
            "query.key": "$response.body#/units/0/unit_key",
        },
        "The first unit of the page, with its stack.",
    )
}
FIRST_UNIT = {
    "first_unit": Link(
        "getRunUnit",
        {
            "path.run_uuid": "$request.path.run_uuid",
            "query.key": "$response.body#/units/0/unit_key",
        },
        "The first unit of the page, with its stack.",
    )
}

OPERATIONS: dict[str, Operation] = {
    "api.runs": Operation(
        "listRuns",
        "Runs, newest first",
        description="An unknown type is an empty page; an unknown status is a 400.",
        query=(
            Param("type", "Only runs of this task type.", TEXT, "payments.monthly_statements"),
            Param("status", "Only runs in this status.", RUN_STATUS, "completed_with_failures"),
            limit(50, 200),
            CURSOR,
        ),
        replies=(
            Reply(
                200,
                "One page of runs.",
                "RunPage",
                {"runs": [RUN_EXAMPLE], "next_cursor": None},
                links=RUN_LINKS,
            ),
        ),
        errors=(400,),
    ),
    "api.run": Operation(
        "getRun",
        "One run: counts, failed and stale units (100 each at most), events",
        description="The `tasks status RUN_UUID --json` shape.",
        path=(RUN_UUID,),
        replies=(
            Reply(
                200,
                "The run.",
                "RunDetail",
                {**RUN_EXAMPLE, "failed_units": [UNIT_EXAMPLE], "stale_units": [], "events": []},
                links=SAME_RUN,
            ),
        ),
        errors=(404,),
    ),
    "api.units": Operation(
        "listRunUnits",
        "Every unit of a run, by unit key",
        path=(RUN_UUID,),
        query=(
            Param("status", "Only units in this status.", UNIT_STATUS, "failed"),
            Param(
                "reason",
                "Only the failed units of this error group (its `reason` as `errors` gives it).",
                REASON_TEXT,
                "probe unit # failed",
            ),
            limit(50, 200),
            CURSOR,
        ),
        replies=(
            Reply(
                200,
                "One page of units.",
                "UnitPage",
                {"units": [UNIT_EXAMPLE], "next_cursor": None},
                links=FIRST_UNIT,
            ),
        ),
        errors=(400, 404),
    ),
    "api.unit": Operation(
        "getRunUnit",
        "One unit of a run, with the redacted stack of its last failure",
        description="The key is a query parameter, never a path segment; a unit the run "
        "does not have is a 404.",
        path=(RUN_UUID,),
        query=(Param("key", "The unit's key (required).", TEXT, "probe-3"),),
        replies=(
            Reply(
                200,
                "The unit.",
                "UnitDetail",
                {
                    **UNIT_EXAMPLE,
                    "unit_key": "probe-3",
                    "last_error": "unhandled builtins.KeyError — see logs, ref 3f9c0a1b",
                    "kind": "crash",
                    "queued_at": "2026-11-29T10:41:51Z",
                    "heartbeat_at": "2026-11-29T10:41:52Z",
                    "stuck_notified_at": None,
                    "created_at": "2026-11-29T10:41:51Z",
                    "stack": [
                        {
                            "file": "taskrunner/jobs.py",
                            "line": 91,
                            "function": "contained_failure",
                            "own": True,
                        },
                        {
                            "file": "diagnostics/probe.py",
                            "line": 42,
                            "function": "_read_settings",
                            "own": True,
                        },
                    ],
                },
            ),
        ),
        errors=(400, 404),
    ),
    "api.errors": Operation(
        "getRunErrors",
        "A run's failed units grouped by redacted reason",
        path=(RUN_UUID,),
        query=(
            limit(50, 200),
            Param(
                "cursor",
                "`next_cursor` of the previous page; a cursor naming no group of the run is a 400.",
                REASON_TEXT,
            ),
        ),
        replies=(
            Reply(
                200,
                "Groups, biggest first.",
                "ErrorGroups",
                {
                    "uuid": EXAMPLE_RUN,
                    "groups": [
                        {
                            "reason": "probe unit # failed",
                            "kind": "domain",
                            "where": "diagnostics/probe.py:84 in probe",
                            "example": "probe unit 10 failed",
                            "count": 100,
                            "retrying": 0,
                            "tenants": 0,
                            "tenant_sample": [],
                        }
                    ],
                    "next_cursor": None,
                },
            ),
        ),
        errors=(400, 404),
    ),
    "api.compare": Operation(
        "compareRuns",
        "A run against another: newly failing, recovered and still failing units",
        description="By default against the previous run of the same type. Each set has "
        "its `count` and its first 50 `units`; a run with no earlier run of its type, or a "
        "`with` that names no other run, is a 404.",
        path=(RUN_UUID,),
        query=(Param("with", "The run to compare with (a uuid).", UUID, EXAMPLE_OTHER_RUN),),
        replies=(
            Reply(
                200,
                "The comparison.",
                "Comparison",
                {
                    "uuid": EXAMPLE_RUN,
                    "with": EXAMPLE_OTHER_RUN,
                    "type": "diagnostics.probe",
                    "newly_failing": {
                        "count": 1,
                        "units": [
                            {
                                **UNIT_EXAMPLE,
                                "previous_status": "completed",
                                "previous_error": None,
                                "failing_runs": None,
                            }
                        ],
                    },
                    "recovered": {"count": 0, "units": []},
                    "still_failing": {"count": 0, "units": []},
                    "new_error_groups": [
                        {
                            "reason": "unhandled sqlalchemy.exc.OperationalError — see logs, ref #",
                            "kind": "vendor",
                            "where": "diagnostics/probe.py:84 in probe",
                            "count": 1,
                        }
                    ],
                    "new_error_groups_count": 1,
                    "duration_seconds": {"run": 3.0, "with": 4.5, "change": -1.5},
                    "throughput_per_minute": {"run": 20000.0, "with": 13333.3},
                },
            ),
        ),
        errors=(400, 404),
    ),
    "api.stale_units": Operation(
        "listStaleUnits",
        "Stale units of running runs, with their reason",
        query=(limit(100, 500), CURSOR),
        replies=(
            Reply(
                200,
                "One page of stale units.",
                "StaleUnitPage",
                {
                    "units": [
                        {
                            **UNIT_EXAMPLE,
                            "status": "running",
                            "last_error": None,
                            "finished_at": None,
                            "stale": True,
                            "stale_reason": "worker lost",
                            "run_uuid": EXAMPLE_RUN,
                            "type": "diagnostics.probe",
                            "heartbeat_at": "2026-11-29T10:41:52Z",
                            "queued_at": "2026-11-29T10:41:51Z",
                        }
                    ],
                    "next_cursor": None,
                },
                links=LISTED_UNIT,
            ),
        ),
        errors=(400,),
    ),
    "api.history": Operation(
        "listUnitHistory",
        "One unit key's or one tenant's units across runs, newest first",
        description="Give exactly one of `key` and `tenant`; both or neither is a 400.",
        query=(
            Param("key", "A unit key.", TEXT, "probe-7"),
            Param(
                "tenant",
                "A tenant id.",
                {"type": "integer", "minimum": 0, "maximum": BIGINT},
                4,
            ),
            limit(50, 200),
            CURSOR,
        ),
        replies=(
            Reply(
                200,
                "One page of units.",
                "UnitHistoryPage",
                {
                    "units": [
                        {
                            **UNIT_EXAMPLE,
                            "run_uuid": EXAMPLE_RUN,
                            "type": "diagnostics.probe",
                            "run_status": "completed_with_failures",
                        }
                    ],
                    "next_cursor": None,
                },
                links=LISTED_UNIT,
            ),
        ),
        errors=(400,),
    ),
    "api.workers": Operation(
        "listWorkers",
        "Consumers, live or lost, and what each worker runs now",
        description="Every consumer process registers and heartbeats; one silent for three "
        "beats is `lost`, and forgotten after `CONSUMER_RETENTION_MINUTES`.",
        replies=(
            Reply(
                200,
                "Every registered consumer.",
                "Consumers",
                {
                    "consumers": [
                        {
                            "id": "worker-1:4242:1764561600000",
                            "host": "worker-1",
                            "pid": 4242,
                            "queues": ["tasks"],
                            "worker_type": "process",
                            "workers": 4,
                            "started_at": "2026-11-29T10:40:00Z",
                            "heartbeat_at": "2026-11-29T10:41:50Z",
                            "heartbeat_age_seconds": 2,
                            "state": "live",
                            "worker_deaths": 1,
                            "deaths": [
                                {
                                    "at": "2026-11-29T10:41:20Z",
                                    "pid": 4247,
                                    "task_id": "u16.9a3b5c7d9e1f2a3b0f2c6a0e8c1e4f7d",
                                    "unit": {
                                        "unit_key": "probe-6",
                                        "tenant_id": None,
                                        "status": "running",
                                        "run_uuid": EXAMPLE_RUN,
                                        "type": "diagnostics.probe",
                                    },
                                }
                            ],
                            "running": [
                                {
                                    "pid": 4250,
                                    "task": "taskrunner.run_unit",
                                    "task_id": "u17.0f2c6a0e8c1e4f7d9a3b5c7d9e1f2a3b",
                                    "since": "2026-11-29T10:41:47Z",
                                    "elapsed_seconds": 5,
                                    "unit": {
                                        "unit_key": "probe-7",
                                        "tenant_id": None,
                                        "status": "running",
                                        "run_uuid": EXAMPLE_RUN,
                                        "type": "diagnostics.probe",
                                    },
                                }
                            ],
                        }
                    ]
                },
            ),
        ),
    ),
    "api.queues": Operation(
        "listQueues",
        "Queues: waiting jobs, oldest pending unit, running, settled per minute and hour",
        replies=(
            Reply(
                200,
                "Every queue, with its task types and which are paused.",
                "Queues",
                {
                    "queues": [
                        {
                            "name": "tasks",
                            "waiting": 120,
                            "pending_units": 130,
                            "oldest_pending_at": "2026-11-29T10:40:00Z",
                            "oldest_pending_seconds": 112,
                            "running": 4,
                            "completed_last_minute": 300,
                            "failed_last_minute": 2,
                            "completed_last_hour": 9000,
                            "failed_last_hour": 40,
                            "types": [
                                {
                                    "type": "diagnostics.probe",
                                    "registered": True,
                                    "pending_units": 130,
                                    "running": 4,
                                    "paused": False,
                                    "paused_at": None,
                                    "paused_by": None,
                                }
                            ],
                        }
                    ],
                    "paused_types": [],
                    "settled_as_of": "2026-11-29T10:41:00Z",
                    "settled_lag_seconds": 52,
                },
            ),
        ),
    ),
    "api.search": Operation(
        "search",
        "Runs by uuid or prefix, tenants by name or id, units by key prefix, errors by text",
        description="Error text is looked up in the failed units of the newest 500 runs. "
        "`exact_run` names the one run a uuid prefix of 8 characters or more matched. "
        "`counts` says how many of each kind matched (counted up to 1,000); `in` and `page` "
        "page through one kind, 20 at a time.",
        query=(
            Param("q", "What to look for; blank finds nothing.", TEXT, "acme"),
            Param(
                "in",
                "Only this kind of match (required with `page`).",
                {"type": "string", "enum": list(SEARCH_SECTIONS)},
                "tenants",
            ),
            Param(
                "page",
                "The page of that kind, from 1.",
                {"type": "integer", "minimum": 1, "maximum": 50, "default": 1},
                1,
            ),
        ),
        replies=(
            Reply(
                200,
                "What matched, at most 20 of each kind.",
                "SearchResults",
                {
                    "query": "acme",
                    "exact_run": None,
                    "runs": [],
                    "tenants": [
                        {
                            "id": 4,
                            "name": "Acme GmbH",
                            "status": "active",
                            "created_at": "2026-11-01T09:00:00Z",
                        }
                    ],
                    "units": [],
                    "errors": [],
                    "counts": {"tenants": 1, "runs": 0, "units": 0, "errors": 0},
                    "section": None,
                    "page": 1,
                },
            ),
        ),
        errors=(400,),
    ),
    "api.schedules": Operation(
        "listSchedules",
        "Every periodic schedule: its rule, next slot, last 14 slots and missed slots",
        description="Read back from the schedules' declarations. A slot whose time passed by "
        "more than its grace unclaimed is `missed` (computed on read too, so it shows while "
        "no scheduler runs), `paused` while its schedule was paused.",
        replies=(
            Reply(200, "Every declared schedule.", "Schedules", {"schedules": [SCHEDULE_EXAMPLE]}),
        ),
    ),
    "api.schedule": Operation(
        "getSchedule",
        "One periodic schedule with its last 100 slots",
        path=(SCHEDULE_NAME,),
        replies=(Reply(200, "The schedule.", "Schedule", SCHEDULE_EXAMPLE),),
        errors=(404,),
    ),
    "api.document": Operation(
        "getBackofficeApiDocument",
        "This document",
        replies=(
            Reply(
                200,
                "The OpenAPI document of the backoffice JSON API.",
                "OpenApiDocument",
                {"openapi": "3.1.0", "info": {"title": "Taskledger backoffice API"}, "paths": {}},
            ),
        ),
    ),
}


def _session_cookie(app: Flask) -> dict[str, Any]:
    return {
        "type": "apiKey",
        "in": "cookie",
        "name": app.config.get("SESSION_COOKIE_NAME", "session"),
        "description": "The session cookie of an operator signed in at `/login`.",
    }


BACKOFFICE = Document(
    title="Taskledger backoffice API",
    description=(
        "Operators' read API over the task runs (the README's JSON API). Signed-in session only "
        "(401 without one, 403 without the permission). Identifiers are uuids and unit "
        "keys; lists end with `next_cursor` (null on the last page). Errors are problem "
        "bodies (`application/problem+json`) with a stable `error` code."
    ),
    covers=lambda path: path.startswith(PREFIX),
    security_scheme="sessionCookie",
    security=_session_cookie,
    operations=OPERATIONS,
    schemas=SCHEMAS,
    headers={},
)
