"""Choice sets of fairshare_app."""
from __future__ import annotations

from django.db import models


class WindowType(models.TextChoices):
    """How the usage window is bounded (KAI ``windowType``)."""

    SLIDING = "sliding", "Sliding (the last window size)"
    TUMBLING = "tumbling", "Tumbling (since the latest reset)"


class ResetPeriod(models.TextChoices):
    """Slurm ``PriorityUsageResetPeriod`` names; usage before the latest boundary is ignored."""

    NONE = "NONE", "Never"
    DAILY = "DAILY", "Daily (00:00 UTC)"
    WEEKLY = "WEEKLY", "Weekly (Sunday 00:00 UTC)"
    MONTHLY = "MONTHLY", "Monthly (1st, 00:00 UTC)"
    QUARTERLY = "QUARTERLY", "Quarterly"
    YEARLY = "YEARLY", "Yearly"


class BudgetPeriod(models.TextChoices):
    DAILY = "DAILY", "Daily"
    WEEKLY = "WEEKLY", "Weekly (from Sunday)"
    MONTHLY = "MONTHLY", "Monthly"
    QUARTERLY = "QUARTERLY", "Quarterly"
    YEARLY = "YEARLY", "Yearly"


class BudgetPolicy(models.TextChoices):
    """What happens to a queue whose GPU-hour budget for the period is spent."""

    DEPRIORITIZE = "deprioritize", "De-prioritise over-quota use (over-quota weight 0)"
    BLOCK_OVER_QUOTA = "block_over_quota", "Stop admitting new over-quota work (GPU limit = quota)"
    REPORT_ONLY = "report_only", "Report only"


class SshareAlgorithm(models.TextChoices):
    FAIR_TREE = "fair_tree", "Fair Tree (Slurm default)"
    CLASSIC = "classic", "Classic"
