"""benchmarks/served_factory.py in a tiny mode: both arms of a served method's graph request timed over a gallery it
indexes with the offline default, a method it cannot build reported, the results file written."""

from __future__ import annotations

import json

from helpers import make_photo
from helpers.benchmark_scripts import benchmark_script

served_factory = benchmark_script("served_factory")


def test_served_factory_times_both_arms_and_reports_what_it_cannot_build(tmp_path, monkeypatch):
    for i in range(3):
        make_photo(tmp_path / "photos" / f"p{i}.jpg", seed=i)
    monkeypatch.setenv("PICTRIEVE_GALLERY", "")  # the script sets it; put back after the test
    out = tmp_path / "out"
    results = served_factory.main([str(tmp_path / "photos"), "--limit", "3", "--methods", "search,no_such_method",
                                   "--calls", "4", "--rounds", "2", "--out", str(out)])
    search = results["search"]
    assert {arm["calls"] for name, arm in search.items() if isinstance(arm, dict)} == {4}
    assert all(arm["median_ms"] > 0 for arm in search.values() if isinstance(arm, dict))
    assert "no served graph 'no_such_method'" in results["no_such_method"]["not built"]
    [written] = out.glob("*.json")
    saved = json.loads(written.read_text())
    assert saved["results"] == results and "served_factory.py" in saved["command"]
