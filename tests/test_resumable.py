"""Measurements recorded as they finish and read back by a resumed run: exactly what was measured, and only for
the very same call."""

import numpy as np
import pandas as pd
import pytest

from systems import resumable


def mixed(n: int, rng_seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(rng_seed)
    return pd.DataFrame({"n": np.arange(n), "ms": rng.random(n), "speedup": [rng.random(), "unsupported", float("nan")][:n],
                         "ok": [True, False, True][:n], "impl": ["a", "b", "c"][:n]})


class Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, n, seed=0):
        self.calls += 1
        return mixed(n, seed), mixed(n, seed + 1).tail(1)


def test_a_recorded_call_is_read_back_exactly(tmp_path):
    measure, seed = Counting(), int(np.random.default_rng().integers(1 << 30))
    first = resumable.measured(tmp_path, ("a", "b"), measure, 3, seed=seed)
    again = resumable.measured(tmp_path, ("a", "b"), measure, 3, seed=seed)
    assert measure.calls == 1
    for left, right in zip(first, again):
        pd.testing.assert_frame_equal(left.reset_index(drop=True), right.reset_index(drop=True))
        assert [type(x) for x in left.speedup] == [type(x) for x in right.speedup]
    assert (tmp_path / "a.csv").is_file() and (tmp_path / "b.csv").is_file()
    for left, right in zip(first, resumable.recorded_result(tmp_path / ".measured" / "a.json")):
        pd.testing.assert_frame_equal(left.reset_index(drop=True), right.reset_index(drop=True))
    resumable.measured(tmp_path, ("a", "b"), measure, 3, seed=seed + 1)  # another call: measured again
    assert measure.calls == 2


def test_an_edited_package_measures_again(tmp_path, monkeypatch):
    measure = Counting()
    resumable.measured(tmp_path, ("a", "b"), measure, 2)
    monkeypatch.setattr(resumable, "_package_fingerprint", lambda: "edited")
    resumable.measured(tmp_path, ("a", "b"), measure, 2)
    assert measure.calls == 2


def test_the_chapters_words_are_outside_the_fingerprint_and_measure_nothing(tmp_path, monkeypatch):
    # a sentence corrected in systems/chapters keeps a stopped run's records; any other edit does not
    package = tmp_path / "systems"
    (package / "chapters").mkdir(parents=True)
    (package / "bench.py").write_text("def sweep(): pass\n")
    (package / "chapters" / "words.py").write_text("WORDS = 'less'\n")
    monkeypatch.setattr(resumable.provenance, "ROOT", tmp_path)

    def fingerprint():
        resumable._package_fingerprint.cache_clear()
        return resumable._package_fingerprint()

    try:
        first = fingerprint()
        (package / "chapters" / "words.py").write_text("WORDS = 'more'\n")
        assert fingerprint() == first
        (package / "bench.py").write_text("def sweep(): return 1\n")
        assert fingerprint() != first
    finally:
        resumable._package_fingerprint.cache_clear()
    from systems.chapters import flash_training

    with pytest.raises(ValueError, match="flash_training.call_facts is in the chapters' words"):
        resumable.measured(tmp_path, "words", flash_training.call_facts, None)


def test_values_that_are_not_tables_round_trip_and_names_must_match(tmp_path):
    value = {"first_call_s": 1.25, "autotune": {"fwd": {"chosen": ["64x64"]}}}
    assert resumable.measured(tmp_path, "cold", lambda: value) == value
    assert resumable.recorded_result(tmp_path / ".measured" / "cold.json") == value
    (tmp_path / "other.json").write_text('{"cold": 1}')
    with pytest.raises(ValueError, match="other.json is not a measurement record"):
        resumable.recorded_result(tmp_path / "other.json")
    assert resumable.measured(tmp_path, "cold", lambda: {"other": 1}) == {"other": 1}  # another function
    with pytest.raises(ValueError, match="2 tables measured, 1 names"):
        resumable.measured(tmp_path, "one", Counting(), 2)


def test_without_a_data_dir_it_only_measures(tmp_path):
    measure = Counting()
    resumable.measured(None, ("a", "b"), measure, 2)
    resumable.measured(None, ("a", "b"), measure, 2)
    assert measure.calls == 2


class StoppingOnce:
    """One point's rows, drawn fresh; stops (raises) once at ``stop_at``, as a run killed there would."""

    def __init__(self, stop_at=None):
        self.stop_at, self.seen = stop_at, []

    def __call__(self, point, earlier, seed=0):
        self.seen.append((point, len(earlier)))
        if point == self.stop_at:
            self.stop_at = None
            raise RuntimeError("stopped")
        rng = np.random.default_rng(seed + point)
        return pd.DataFrame({"point": [point] * 2, "ms": rng.random(2), "earlier": [len(earlier)] * 2,
                             "status": ["ok", "OOM"]})


def test_a_sweep_stopped_part_way_resumes_at_the_first_point_it_did_not_finish(tmp_path):
    seed, stopping = int(np.random.default_rng().integers(1 << 30)), StoppingOnce(stop_at=3)
    with pytest.raises(RuntimeError, match="stopped"):
        resumable.measured_sweep(tmp_path, "sweep", stopping, range(5), seed=seed)
    assert stopping.seen == [(0, 0), (1, 2), (2, 4), (3, 6)]
    assert "sweep" in resumable.recorded(tmp_path)
    finished = resumable.measured_sweep(None, "sweep", StoppingOnce(), range(3), seed=seed)
    pd.testing.assert_frame_equal(resumable.recorded_result(tmp_path / ".measured" / "sweep.json"), finished)
    resumed = resumable.measured_sweep(tmp_path, "sweep", stopping, range(5), seed=seed)
    assert stopping.seen[4:] == [(3, 6), (4, 8)]  # the three finished points read back, and given as earlier rows
    whole = resumable.measured_sweep(None, "sweep", StoppingOnce(), range(5), seed=seed)
    pd.testing.assert_frame_equal(resumed, whole)
    assert resumed.earlier.tolist() == [0, 0, 2, 2, 4, 4, 6, 6, 8, 8]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "sweep.csv"), whole)
    other = StoppingOnce()  # another call of the sweep: every point measured again
    resumable.measured_sweep(tmp_path, "sweep", other, range(5), seed=seed + 1)
    assert len(other.seen) == 5


def test_a_sweep_without_a_folder_records_nothing_and_asks_git_nothing(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("nothing is recorded, so nothing needs a key or a commit")

    monkeypatch.setattr(resumable.provenance, "git_commit", refused)
    monkeypatch.setattr(resumable, "call_key", refused)
    table = resumable.measured_sweep(None, "sweep", StoppingOnce(), range(3))
    assert table.point.tolist() == [0, 0, 1, 1, 2, 2]
