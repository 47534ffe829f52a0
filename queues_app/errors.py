"""The one error type raised by services.

``ApplicationError(message, extra={field: [messages]})``: ``message`` is a human summary,
``extra`` names every offending field with its reasons.  The DRF exception handler maps it
(and Django's ``ValidationError``) to a 400 with body ``{"message": ..., "extra": {...}}``;
the admin shows ``extra`` as field errors.
"""
from __future__ import annotations

from typing import Any, Mapping

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError


class ApplicationError(Exception):
    def __init__(self, message: str, extra: Mapping[str, list[str] | str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra: dict[str, list[str]] = {
            k: ([v] if isinstance(v, str) else [str(m) for m in v]) for k, v in (extra or {}).items()
        }

    def __str__(self) -> str:
        if not self.extra:
            return self.message
        detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in self.extra.items())
        return f"{self.message} ({detail})"

    def as_dict(self) -> dict[str, Any]:
        return {"message": self.message, "extra": self.extra}

    @classmethod
    def from_validation_error(cls, exc: ValidationError, message: str = "Invalid input.") -> "ApplicationError":
        """Field-level messages of a Django ValidationError; non-field ones go under ``__all__``."""
        if hasattr(exc, "error_dict"):
            extra = {
                (NON_FIELD_ERRORS if k == NON_FIELD_ERRORS else k): [str(m) for e in v for m in e.messages]
                for k, v in exc.error_dict.items()
            }
        else:
            extra = {NON_FIELD_ERRORS: [str(m) for m in exc.messages]}
        return cls(message, extra=extra)

    def as_validation_error(self) -> ValidationError:
        """For the admin: put the messages back on the form fields."""
        if not self.extra:
            return ValidationError(self.message)
        return ValidationError({k: v for k, v in self.extra.items()})
