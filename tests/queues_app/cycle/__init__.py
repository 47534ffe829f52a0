"""Tests of queues_app/cycle: the scheduling cycle, the engine boundary, what-if, replay, crash points."""
