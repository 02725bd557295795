"""The lab: the dashboard over a fleet of real workers (``dashboard``; the fleet itself is
``leaselab.harness.fleet``), the history drawn as a timeline (``timeline``), scripted scenarios
(``scenario``) and the lab's words in each language (``i18n``).

``from leaselab.lab import Lab`` imports the dashboard, and so ipywidgets, only when asked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Lab"]


def __getattr__(name: str) -> Any:
    if name == "Lab":
        from .dashboard import Lab

        return Lab
    raise AttributeError(f"module 'leaselab.lab' has no attribute {name!r}")
