"""The suite's measured time as the contributing page shows it (``site_scripts/records/gen_suite.py``).

Scope: the table rendered from a record of ``measure_suite``: a run over its bound, or one that failed, is
shown as not within it, in both languages; a run within it is shown so. Non-scope: measuring (that runs the
whole suite) and the committed record's figures.
"""

from __future__ import annotations

from site_scripts.records.gen_suite import QUICK_BOUND_S, SUITE_BOUND_S, timings_table, within


def record(test_s: float, quick_s: float, test_exit: int = 0) -> dict:
    runs = [{"command": "make setup", "wall_s": 70.0, "returncode": 0, "summary": None},
            {"command": "make test", "wall_s": test_s, "returncode": test_exit, "summary": "1 passed"},
            {"command": "make test-quick", "wall_s": quick_s, "returncode": 0, "summary": "1 passed"}]
    return {"commit": "0123456789abcdef", "cpu": "Some CPU", "cores": 2, "date": "2026-12-03T12:00:00Z",
            "load_1m": {"before": 0.1, "after": 2.0}, "runs": runs}


def test_a_run_is_within_its_bound_only_when_it_passed_in_time() -> None:
    assert within(record(SUITE_BOUND_S, QUICK_BOUND_S)) == {"make test": True, "make test-quick": True}
    assert within(record(SUITE_BOUND_S + 1, QUICK_BOUND_S + 1)) == {"make test": False,
                                                                    "make test-quick": False}
    assert within(record(60, 60, test_exit=1))["make test"] is False


def test_the_table_says_which_runs_kept_their_bound_in_both_languages() -> None:
    slow = record(SUITE_BOUND_S + 30, 60)
    english, chinese = timings_table(slow, "en"), timings_table(slow, "zh")
    assert "| `make test` | 750 s (12.5 min) | 1 passed | 720 s (12.0 min) | **no** |" in english
    assert "| `make test-quick` | 60 s (1.0 min) | 1 passed | 120 s (2.0 min) | yes |" in english
    assert "| **否** |" in chinese and "| 是 |" in chinese
    assert "commit `0123456`" in english and "Some CPU, 2 cores" in english


def test_the_note_says_whether_pip_s_cache_served_the_set_up_and_how_long_one_tokenizer_build_took() -> None:
    cached = {**record(60, 60), "pip_cache": True, "tokenizer_build_s": 2.53}
    english, chinese = timings_table(cached, "en"), timings_table(cached, "zh")
    assert "served by pip's cache" in english and "took 2.53 s there" in english
    assert "用了 pip 的缓存" in chinese and "用了 2.53 秒" in chinese
    assert "pip's cache off" in timings_table({**cached, "pip_cache": False}, "en")
    assert "pip" not in timings_table(record(60, 60), "en"), "an older record says nothing of pip's cache"


def test_a_second_make_serve_is_within_its_bound_only_when_it_served_within_30_s() -> None:
    def serving(first_s: float, again_s: float, again_served: bool = True) -> dict:
        runs = [{"command": "make serve", "wall_s": first_s, "returncode": 0, "summary": "served"},
                {"command": "make serve (again)", "wall_s": again_s, "returncode": 0 if again_served else 1,
                 "summary": "served" if again_served else None}]
        return {**record(60, 60), "runs": record(60, 60)["runs"] + runs}

    assert within(serving(299, 30)) == {"make test": True, "make test-quick": True, "make serve": True,
                                         "make serve (again)": True}
    assert not within(serving(301, 31))["make serve"] and not within(serving(301, 31))["make serve (again)"]
    assert not within(serving(100, 10, again_served=False))["make serve (again)"]
    assert "| `make serve (again)` | 25 s (0.4 min) | served | 30 s (0.5 min) | yes |" in timings_table(
        serving(200, 25), "en")
