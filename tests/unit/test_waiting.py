"""Waiting on another process: a timeout says what it waited for, and what was left."""

from __future__ import annotations

import pytest

from harness import WaitTimeout, wait_for


def test_a_timeout_names_the_condition_and_reads_its_detail_only_then():
    read = []

    def detail() -> str:
        read.append(1)
        return "3 units left"

    assert wait_for(lambda: "done", timeout=0, detail=detail) == "done"
    assert read == []  # nothing to say when it came in time
    with pytest.raises(WaitTimeout) as raised:
        wait_for(lambda: None, timeout=0, interval=0, message="every unit", detail=detail)
    assert str(raised.value) == "timed out after 0 s waiting for every unit; 3 units left"
