"""Models of fairshare_app, split by entity and re-exported here."""
from fairshare_app.models.accounting import (
    AccountingInterval,
    AccountingState,
    NormalizedUsage,
    QueueIntervalStat,
    UsageRecord,
)
from fairshare_app.models.budgets import GpuBudget
from fairshare_app.models.settings import FairshareSettings

__all__ = [
    "AccountingInterval",
    "AccountingState",
    "FairshareSettings",
    "GpuBudget",
    "NormalizedUsage",
    "QueueIntervalStat",
    "UsageRecord",
]
