"""Usage accounting, decay and fair-share reports (issue #6)."""
