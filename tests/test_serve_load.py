"""`specsched bench serve` end to end on sim (the harness, not a speed): every request served once, none
lost or duplicated, the killed client's workers freed, each prompt's greedy text the same under every policy."""

from cli_runs import FAST_FLAGS, assert_one_error_line, read_json, specsched

from specsched.runtime.apps.serve.load import Load, Seen, duplicated, percentile


def test_the_load_test_serves_every_request_once_under_each_policy(tmp_path):
    path = tmp_path / "load.json"
    sim = FAST_FLAGS[2:]  # its --backend is sim already
    result = specsched("bench", "serve", *sim, "--requests", "9", "--clients", "3", "--rate", "20",
                       "--max-tokens", "12", "--policies", "fcfs,priority,goodput", "--json", str(path), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    record = read_json(path)
    assert [r["policy"] for r in record["policies"]] == ["fcfs", "priority", "goodput"]
    for row in record["policies"]:
        assert (row["served"], row["killed"], row["lost"], row["duplicated"]) == (8, 1, 0, 0), row
        assert row["workers_busy_after_kill"] == 0 and row["ttft_p99_s"] >= row["ttft_p50_s"] > 0
    assert record["texts_identical"] and record["provenance"]["software"]["git_commit"]


def test_bad_load_flags_are_one_line():
    assert_one_error_line(specsched("bench", "serve", "--requests", "0"), 2, "--requests must be in 1..1000")
    assert_one_error_line(specsched("bench", "serve", "--rate", "-1"), 2, "--rate must be")
    assert_one_error_line(specsched("bench", "serve", "--policies", "nosuch"), 2, "nosuch")


def test_arrivals_are_seeded_and_duplicates_counted():
    load = Load(requests=5, clients=2, rate=3.0, max_tokens=4, prompts=("a",), model="m", seed=3)
    assert load.arrivals() == Load(5, 2, 3.0, 4, ("a",), "m", seed=3).arrivals() and load.arrivals()[0] == 0.0
    one, two = Seen(0, ids={"x"}, ended=1), Seen(1, ids={"x"}, ended=1)
    assert duplicated([one, two]) == 2 and duplicated([one, Seen(1, ids={"y"}, ended=2)]) == 1
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([], 99) is None
