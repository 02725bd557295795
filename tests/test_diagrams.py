"""The protocol's pictures (leaselab.lessons.diagrams): drawn from the real table and a real run, legible, in
both lesson languages."""

from __future__ import annotations

import itertools

import pytest

from leaselab.lessons import diagrams
from leaselab.lessons.texts import text
from leaselab.lifecycle import TRANSITIONS


def _texts(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # pyplot let go of the figure: give it a canvas that renders
    canvas.draw()
    renderer = canvas.get_renderer()
    shown = [a for a in fig.findobj() if hasattr(a, "get_text") and a.get_text().strip() and a.get_visible()]
    return shown, renderer


def _overlaps(fig) -> list[tuple[str, str]]:
    shown, renderer = _texts(fig)
    boxes = [(a.get_text(), a.get_window_extent(renderer)) for a in shown]
    return [(x, y) for (x, bx), (y, by) in itertools.combinations(boxes, 2) if bx.overlaps(by)]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_state_diagram_names_every_call_and_status_and_no_label_covers_another(lang):
    fig = diagrams.lifecycle(lang)
    shown, _ = _texts(fig)
    words = " ".join(a.get_text() for a in shown)
    for row in TRANSITIONS:
        assert row.call in words
    for status in ("pending", "running", "done", "dead"):
        assert status in words
    assert text("dg_attempts_spent", lang) in words and text("dg_lifecycle_title", lang) in words
    assert _overlaps(fig) == []


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_zombie_diagram_is_a_real_run_whose_old_token_is_refused(lang):
    calls, history, (frozen_from, frozen_to) = diagrams.zombie_story(lang)
    assert [e.kind for e in history] == [
        "enqueued",
        "claimed",
        "heartbeat",
        "reaped",
        "claimed",
        "lease_lost",
        "completed",
    ]
    refused = [c for c in calls if c.refused]
    assert [(c.who, c.call) for c in refused] == [("A", "complete(a1a1)")]
    reap = next(c for c in calls if c.call == "reap")
    lease_end = next(c for c in calls if c.call.startswith("heartbeat")).at + diagrams.LEASE
    assert frozen_from < lease_end < reap.at < refused[0].at <= frozen_to  # frozen across the reap
    assert history[-1].worker == "B"
    assert diagrams.zombie_story(lang)[0] == calls  # the same picture every time: no random token, no real clock


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_zombie_diagram_draws_every_call_in_the_lessons_language_with_no_label_over_another(lang):
    fig, _ = diagrams.zombie(lang)
    shown, _ = _texts(fig)
    words = [a.get_text() for a in shown]
    assert text("dg_refused", lang) in words and text("dg_seconds", lang, at=18) in words
    assert _overlaps(fig) == []
