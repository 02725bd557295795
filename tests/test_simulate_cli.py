"""``leaselab simulate``, as a user runs it: exit codes, JSON, a saved witness replayed, Russian, a user's handler
judged for repeated effects, progress, help; and the spans it gives the lab's timeline."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab.sim import explore, mutants, report
from leaselab.sim.texts import STRINGS
from leaselab.sim.world import FAULTS, Scenario

LEASELAB = str(Path(sys.executable).with_name("leaselab"))


# A search that must find: a budget of schedules, never of seconds, so a loaded machine finds the same.
BUDGET = ("--schedules", "3000")


def simulate(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LEASELAB, "simulate", *argv], capture_output=True, text=True, timeout=300, cwd=cwd, check=False
    )


def _steps(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.match(r"\s*\d+\. ", line)]


def test_help_lists_every_option(tmp_path):
    out = simulate("--help", cwd=tmp_path)
    assert out.returncode == 0
    for option in (
        "--seed", "--seconds", "--schedules", "--exhaustive", "--workers", "--jobs", "--faults", "--replay",
        "--json", "--lang", "--handler", "--mutant", "--save", "--list-mutants",
    ):  # fmt: skip
        assert option in out.stdout


def test_a_clean_search_exits_0_and_says_what_it_covered(tmp_path):
    out = simulate("--schedules", "12", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "every promise held: 12 schedules" in out.stdout
    assert "s of virtual time simulated" in out.stdout
    # Progress, if the run lasted past its first two seconds (a loaded machine), goes to stderr only.
    progress = re.compile(r"\s*[\d.]+ s\s+[\d,]+ schedules?\s+[\d,]+ steps?")
    assert all(progress.fullmatch(line) for line in out.stderr.splitlines()), out.stderr
    assert not any(progress.fullmatch(line) for line in out.stdout.splitlines()), out.stdout
    assert not (tmp_path / report_default()).exists()


def report_default() -> str:
    from leaselab.sim.command import DEFAULT_SAVE

    return DEFAULT_SAVE


def test_an_exhaustive_run_counts_its_distinct_states(tmp_path):
    out = simulate(
        "--exhaustive",
        "--workers",
        "1",
        "--jobs",
        "1",
        "--faults",
        "crash",
        "--schedules",
        "30",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["mode"] == "exhaustive" and result["found"] is False
    assert result["states"] >= 30 and result["complete"] is False  # stopped at the limit, and says so


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--schedules", "0"], "--schedules must be a whole number of at least 1, got '0'"),
        (["--workers", "two"], "--workers must be a whole number of at least 1, got 'two'"),
        (["--seconds", "-1"], "--seconds must be a number of seconds above 0, got '-1'"),
        (["--faults", "crash,meteor"], "no fault named 'meteor'"),
        (["--seconds", "1", "--schedules", "2"], "--seconds and --schedules cannot be given together"),
        (["--mutant", "no_such_bug"], "no mutant named 'no_such_bug'"),
        (["--handler", "nomodule"], "--handler must look like module:function"),
        (["--handler", "no_such_module_xyz:f"], "--handler no_such_module_xyz:f"),
        (["--replay", "absent.json"], "no witness file at absent.json"),
        (["--replay", "garbled.json"], "garbled.json is not a witness file: not JSON"),
        (["--replay", "partial.json"], "its field 'actions' is missing or malformed"),
        (["--replay", "partial.json", "--seed", "3"], "--replay and --seed cannot be given together"),
    ],
)
def test_a_usage_error_exits_2_naming_the_problem_in_either_language(tmp_path, argv, says):
    (tmp_path / "garbled.json").write_text("{not json")
    (tmp_path / "partial.json").write_text(json.dumps({"format": 1, "scenario": {}, "seed": 0}))
    out = simulate(*argv, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("leaselab simulate: error: ") and says in out.stderr
    ru = simulate(*argv, "--lang", "ru", cwd=tmp_path)
    assert ru.returncode == 2 and ru.stderr.startswith("leaselab simulate: ошибка: ")
    assert ru.stderr != out.stderr


def test_a_planted_mutant_is_caught_saved_and_replayed_with_the_very_same_trace(tmp_path):
    out = simulate("--mutant", "unfenced_complete", *BUDGET, "--save", "w.json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "found: a write accepted from a token that no longer held the job" in out.stdout
    assert "timeline (virtual seconds, one row per worker):" in out.stdout
    assert re.search(r"^w1 \|", out.stdout, re.M) and re.search(r"\+-+\+", out.stdout)
    saved = json.loads((tmp_path / "w.json").read_text())
    assert saved["format"] == report.FORMAT and saved["leaselab"] and saved["mutant"] == "unfenced_complete"
    assert saved["violation"]["kind"] == "fence" and saved["violation"]["message"]
    assert set(saved["scenario"]) >= {"workers", "jobs", "lease", "faults"} and isinstance(saved["seed"], int)
    assert saved["actions"] and "witness saved to w.json" in out.stdout

    replay = simulate("--replay", "w.json", cwd=tmp_path)
    assert replay.returncode == 1, replay.stderr
    assert _steps(replay.stdout) == _steps(out.stdout)  # byte for byte
    assert "the trace is the saved one, step for step" in replay.stdout

    saved["mutant"] = None  # the bug taken out: the same schedule must now pass
    (tmp_path / "fixed.json").write_text(json.dumps(saved))
    fixed = simulate("--replay", "fixed.json", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert "so the bug is fixed" in fixed.stdout


def test_json_is_one_object_with_the_documented_fields(tmp_path):
    clean = simulate("--schedules", "5", "--json", cwd=tmp_path)
    assert clean.returncode == 0
    result = json.loads(clean.stdout)
    assert {"mode", "scenario", "seed", "mutant", "handler", "schedules", "steps", "virtual_seconds",
            "elapsed_seconds", "found", "violation"} <= set(result)  # fmt: skip
    assert result["found"] is False and result["schedules"] == 5 and result["violation"] is None

    found = simulate("--mutant", "unfenced_complete", *BUDGET, "--json", "--save", "w.json", cwd=tmp_path)
    assert found.returncode == 1
    result = json.loads(found.stdout)
    assert result["found"] is True and result["violation"]["kind"] == "fence" and result["saved"] == "w.json"
    witness = result["witness"]
    assert {"seed", "actions", "faults", "shrunk_from", "trace", "timeline"} <= set(witness)
    assert {"lanes", "bars", "faults", "marks", "points", "t0", "t1"} <= set(witness["timeline"])


def test_russian_output_has_no_english_words(tmp_path):
    en = simulate("--mutant", "unfenced_complete", *BUDGET, "--save", "w.json", cwd=tmp_path).stdout
    ru = simulate("--mutant", "unfenced_complete", *BUDGET, "--save", "w.json", "--lang", "ru", cwd=tmp_path).stdout
    code = set(FAULTS) | {"leaselab", "simulate", "replay", "json", "unfenced", "complete", "pending", "heartbeat"}
    english = set(re.findall(r"[A-Za-z]{3,}", en)) - code
    leaked = set(re.findall(r"[A-Za-z]{3,}", ru)) & english
    assert leaked == set(), leaked
    assert len(en.splitlines()) == len(ru.splitlines())
    assert "найдено:" in ru and "0,000" in ru


def test_a_handler_that_is_not_idempotent_is_caught_with_a_short_witness(tmp_path):
    out = simulate("--handler", "leaselab.sim.examples:pay", *BUDGET, "--json", "--save", "w.json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    result = json.loads(out.stdout)
    assert result["violation"]["kind"] == "effect_repeated"
    assert "leaselab.sim.examples:pay is not idempotent" in result["violation"]["message"]
    assert result["witness"]["faults"] <= 2 and len(result["witness"]["actions"]) <= 12
    replay = simulate("--replay", "w.json", cwd=tmp_path)  # the handler is named in the witness
    assert replay.returncode == 1 and "effect repeated (the handler is not idempotent)" in replay.stdout


def test_the_same_payment_under_an_idempotency_key_passes(tmp_path):
    out = simulate("--handler", "leaselab.sim.examples:pay_once", "--schedules", "300", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every promise held: 300 schedules" in out.stdout
    assert list(tmp_path.iterdir()) == []  # the handler's ledgers lived in a scratch folder, now gone


def test_progress_goes_to_stderr_for_a_longer_run_only(tmp_path):
    out = simulate("--seconds", "4", "--json", cwd=tmp_path)
    assert out.returncode == 0
    json.loads(out.stdout)  # stdout is the one JSON object, progress or not
    assert re.search(r"^\s*\d+\.\d s  [\d,]+ schedules  [\d,]+ steps$", out.stderr, re.M), out.stderr


def test_the_shipped_mutants_are_listed(tmp_path):
    out = simulate("--list-mutants", cwd=tmp_path)
    assert out.returncode == 0
    assert all(name in out.stdout for name in mutants.NAMES)
    assert simulate("--mutant", "list", cwd=tmp_path).stdout == out.stdout


# -- in process: the steps read back, and the lab's timeline drawn from the spans ---------------------


def _runs() -> list[explore.Run]:
    runs = [explore.run(Scenario(), seed) for seed in range(40)]
    with mutants.planted("unfenced_complete"):
        found, _, _ = explore.search(Scenario(), seed=0, schedules=400)
    assert found is not None
    return [*runs, found]


def test_every_step_the_world_writes_is_read_back_and_said_again_word_for_word():
    for run in _runs():
        for line in run.trace:
            step = report.read_step(line)
            assert step.key is not None, f"no pattern reads {line!r}"
            assert step.render("en") == step.line
            assert not re.search(r"\b(job|worker|holds|handler|lease)\b", step.render("ru"))


def test_both_languages_have_the_same_lines():
    assert STRINGS["en"].keys() == STRINGS["ru"].keys()


def test_the_lab_timeline_draws_a_simulated_run():
    from leaselab.lab.timeline import Bar, Fault, Mark, Timeline, draw

    run = _runs()[-1]
    data = report.spans(run)
    timeline = Timeline(
        lanes=data["lanes"],
        bars=[Bar(**b) for b in data["bars"]],
        marks=[Mark(**m) for m in data["marks"]],
        faults=[Fault(**f) for f in data["faults"]],
        t0=data["t0"],
        t1=data["t1"],
    )
    assert timeline.bars and {b.worker for b in timeline.bars} <= set(timeline.lanes)
    assert draw(timeline, lang="ru") is not None


def test_every_promise_the_simulator_can_name_has_a_title_in_both_languages():
    from leaselab.sim.model import KINDS, Violation
    from leaselab.sim.report import title
    from leaselab.sim.texts import text

    for kind in KINDS:
        fallback = text("kind", "en", kind=kind)
        en, ru = title(kind, "en"), title(kind, "ru")
        assert en != fallback and ru != text("kind", "ru", kind=kind) and en != ru, kind
    with pytest.raises(ValueError, match="no promise named"):
        Violation("made_up", "a kind nobody can translate")


def test_without_a_scenario_of_its_own_the_search_takes_turns_with_the_portfolio(tmp_path):
    # Two jobs and one slot (the default Scenario) never spend a job's attempts: only the portfolio's
    # job that fails every attempt shows a bug in how attempts run out.
    out = simulate("--mutant", "attempt_too_many", "--schedules", "40", "--json", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert len(result["scenarios"]) == len(explore.PORTFOLIO) and result["violation"]["kind"] == "queue_error"
    mine = simulate("--workers", "2", "--jobs", "2", "--schedules", "5", "--json", cwd=tmp_path)
    assert mine.returncode == 0 and [s["jobs"] for s in json.loads(mine.stdout)["scenarios"]] == [2, 2, 2]


def test_hangs_give_the_jobs_a_timeout_and_a_pulse_that_ignores_it_is_caught_in_both_languages(tmp_path):
    clean = simulate("--faults", "hang,crash", "--schedules", "200", cwd=tmp_path)
    assert clean.returncode == 0 and "every promise held: 200 schedules" in clean.stdout, clean.stdout + clean.stderr
    en = simulate("--faults", "hang", "--mutant", "timeout_ignored", *BUDGET, "--save", "w.json", cwd=tmp_path)
    assert en.returncode == 1, en.stdout + en.stderr
    assert "found: a lease renewed past its attempt's timeout" in en.stdout
    assert "handler of job" in en.stdout and "hangs: its pulse goes on" in en.stdout
    ru = simulate("--replay", "w.json", "--lang", "ru", cwd=tmp_path)  # the witness names its mutant
    assert "аренду продлили, хотя попытка уже вышла за свой тайм-аут" in ru.stdout, ru.stdout + ru.stderr
    assert "завис, а пульс продолжает продлевать аренду" in ru.stdout
