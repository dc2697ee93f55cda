from __future__ import annotations

from diagnostics.effects import EffectsTask
from diagnostics.probe import ProbeTask, VendorProbeTask
from taskrunner.contract import register


def init_app(_app) -> None:
    register(ProbeTask())
    register(EffectsTask())
    register(VendorProbeTask())
