"""Unit jobs skip Huey's revoke-key cleanup after they run; every other job keeps it.

A gated job's own gate refuses a revoked dispatch, so the round trip Huey spends per job
deleting a revoke key that almost never exists is left out for it (``tasks.gated_jobs``).
The check at dequeue stays: a revoked gated job waiting in the queue is still skipped.
"""

from __future__ import annotations

from huey import SqliteHuey

from taskrunner.dispatch import RUN_UNIT
from tasks.gated_jobs import skip_revoke_cleanup
from tasks.queues import queues


def make_huey(tmp_path) -> SqliteHuey:
    huey = SqliteHuey("taskledger.test-gated", filename=str(tmp_path / "q.sqlite3"))
    skip_revoke_cleanup(huey, ["gated"])
    return huey


def test_a_gated_job_revoked_while_it_ran_keeps_its_key_and_another_job_loses_it(tmp_path):
    huey = make_huey(tmp_path)
    deletes = []
    storage_delete = huey.storage.delete_data
    huey.storage.delete_data = lambda key: deletes.append(key) or storage_delete(key)

    @huey.task(name="gated", context=True)
    def gated(task=None):
        huey.revoke_by_id(task.id)  # a cancel landing while the job runs

    @huey.task(name="plain", context=True)
    def plain(task=None):
        huey.revoke_by_id(task.id)

    gated_job, plain_job = gated.s(), plain.s()
    huey.execute(gated_job)
    huey.execute(plain_job)

    assert deletes == [plain_job.revoke_id]  # Huey's cleanup, for the plain job only
    assert huey.is_revoked(gated_job.id) and not huey.is_revoked(plain_job.id)


def test_a_revoked_gated_job_is_still_skipped_at_dequeue(tmp_path):
    huey = make_huey(tmp_path)
    ran = []

    @huey.task(name="gated")
    def gated():
        ran.append(1)

    job = gated.s()
    huey.revoke_by_id(job.id)
    huey.execute(job)

    assert ran == []


def test_a_job_that_deletes_a_key_itself_still_deletes_it(tmp_path):
    huey = make_huey(tmp_path)
    huey.put("r:other", (None, False))

    @huey.task(name="gated")
    def gated():
        huey.delete("r:other")

    huey.execute(gated.s())

    assert "r:other" not in list(huey.storage.result_items())


def test_every_queue_skips_the_cleanup_for_unit_jobs_only(ctx):
    for name, huey in queues().all().items():
        assert huey.gated_jobs == {RUN_UNIT}, name
