"""Every write of fairshare_app (keyword-only, typed, atomic)."""
from fairshare_app.services.accounting import AccountingResult, normalized_usage_refresh, usage_account
from fairshare_app.services.budgets import budget_create, budget_delete, budget_update
from fairshare_app.services.compaction import usage_compact
from fairshare_app.services.settings import fairshare_settings_get, fairshare_settings_update

__all__ = [
    "AccountingResult",
    "budget_create",
    "budget_delete",
    "budget_update",
    "fairshare_settings_get",
    "fairshare_settings_update",
    "normalized_usage_refresh",
    "usage_account",
    "usage_compact",
]
