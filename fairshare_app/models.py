"""Usage accounting models live here (owned by the fair-share engineer, issue #6)."""
