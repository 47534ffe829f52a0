"""The cyclic collector pause shared by allocate, the evicting actions and the result builder: it must
leave the collector as it found it (on or off), also when the phase raises, or every later phase of a
long-lived worker would run with it off (memory grows) or on when the caller had turned it off."""
import gc

import pytest

from scheduler_engine.collector import cyclic_gc_paused


@pytest.fixture
def restore_gc():
    was, thresholds = gc.isenabled(), gc.get_threshold()
    gc.set_threshold(10**6, 1000, 1000)  # no automatic collection in between to count
    yield
    gc.set_threshold(*thresholds)
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("collect_young", [True, False])
@pytest.mark.parametrize("enabled", [True, False])
def test_paused_inside_and_restored_after(restore_gc, enabled, collect_young):
    (gc.enable if enabled else gc.disable)()
    with cyclic_gc_paused(collect_young=collect_young):
        assert not gc.isenabled()
    assert gc.isenabled() is enabled


def test_restored_when_the_phase_raises(restore_gc):
    gc.enable()
    with pytest.raises(RuntimeError):
        with cyclic_gc_paused():
            raise RuntimeError("phase failed")
    assert gc.isenabled()


def test_young_generations_collected_once_on_exit(restore_gc):
    gc.enable()
    before = gc.get_stats()[1]["collections"]
    with cyclic_gc_paused():
        pass
    assert gc.get_stats()[1]["collections"] == before + 1
    with cyclic_gc_paused(collect_young=False):
        pass
    assert gc.get_stats()[1]["collections"] == before + 1
