"""Chaos (the slow set): children killed at random while a run goes on - the verifier included - and
the output is exactly the undisturbed run's, greedy and sampled with a seed, with every kill restarted
and recorded; the same on the real default pair: greedy with a worker, a verifier and a zygote kill, and
sampled with twenty random kills."""

from __future__ import annotations

import random
import time

import psutil
import pytest
from helpers import sim_config, words

from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine

VOCAB = 64  # with these prompts no sequence ends early, greedy or sampled at T = 0.5 with seed 2: every
# worker drafts through the 10 s of kills (a victim never finishes its sequence as the kill lands)


def serving(engine: Engine, killed: set[int]) -> list[dict]:
    """Processes serving the job; not one killed a moment ago and listed until it is reaped."""
    return [p for p in engine.processes if p["pid"] not in killed
            and (p["state"] == "drafting" or (p["name"] == "verifier" and p["state"] == "ready"))]


def kill(process: dict) -> bool:
    """SIGKILL to a listed child. A restarted child has no pid until the zygote reports its fork: not killable
    yet (and psutil.Process(None) would be this process, the test runner)."""
    if process["pid"] is None:
        return False
    try:
        psutil.Process(process["pid"]).kill()
        return True
    except psutil.NoSuchProcess:  # killed a moment ago, not reaped yet
        return False


def started(engine: Engine, name: str, deadline: float) -> dict:
    """The live child called `name` once it has a pid."""
    while True:
        found = [p for p in engine.processes if p["name"] == name and p["state"] != "exited" and p["pid"]]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"{name} had no pid before the deadline"
        time.sleep(0.01)


def no_orphans() -> bool:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE] == []


@pytest.mark.slow
@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (0.5, 2)])
def test_a_random_child_killed_every_half_second_twenty_times_changes_nothing(temperature, seed):
    config = sim_config(sim_vocab=VOCAB, sim_draft_ms=20, sim_verify_ms=30, max_restarts=20, restart_period_s=5)
    prompts = [words(VOCAB, (i + 1, i + 3)) for i in range(8)]
    settings = dict(max_new_tokens=300, temperature=temperature, seed=seed)
    rng, killed, pids = random.Random(seed), [], set()
    with Engine(config) as e:
        job = e.submit(prompts, **settings)
        deadline = time.monotonic() + 300
        while len(killed) < 20:
            time.sleep(0.5)
            assert not job.done(), f"the run ended after {len(killed)} kills"
            assert time.monotonic() < deadline, f"only {len(killed)} kills in 300 s: nothing served"
            children = serving(e, pids)
            if not children:  # each one just killed and not yet back (a busy machine): kill at the next tick
                continue
            victim = next(p for p in children if p["name"] == "verifier") if len(killed) % 4 == 3 and any(
                p["name"] == "verifier" for p in children) else rng.choice(children)  # every 4th: the verifier
            pids.add(victim["pid"])
            if kill(victim):
                killed.append(victim["name"])
        record = job.result(timeout=600)
        undisturbed = e.generate(prompts, **settings)
    assert no_orphans()
    assert record.status == "ok", record.error
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    assert all(s.finished for s in record.sequences)  # nothing verified lost, nothing cut short
    assert len(record.collected.restarts) == 20 and killed.count("verifier") >= 5
    assert sorted(r["process"] for r in record.collected.restarts) == sorted(
        "verifier" if name == "verifier" else name for name in killed)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0])
def test_on_the_default_pair_worker_verifier_and_zygote_kills_change_nothing(temperature):
    """The real models, greedy and sampled (`--coupling gumbel`: the text depends on the seed and the target
    alone, so a restarted draft cannot change it, and `ar` writes it too)."""
    prompt = "Name three colours and say why the sky is blue."
    settings = dict(workers=1, max_new_tokens=48, temperature=temperature, coupling="gumbel", seed=11)
    with Engine(RunConfig()) as e:
        undisturbed = e.generate(prompt, **settings)
        target_only = e.generate(prompt, **{**settings, "mode": "ar"})
        job = e.submit(prompt, **settings)
        for victim in ("draft-0", "verifier", "zygote"):
            committed = sum(map(len, job.collected.tokens.values()))
            deadline = time.monotonic() + 300
            while sum(map(len, job.collected.tokens.values())) <= committed + 4:  # a few tokens more each time
                assert time.monotonic() < deadline and not job.done()
                time.sleep(0.01)
            if victim == "zygote":
                (zygote,) = [p for p in psutil.Process().children() if p.cmdline()[:1] == ["specsched: zygote"]]
                zygote.kill()
            else:
                assert kill(started(e, victim, deadline))
        record = job.result(timeout=600)
    assert no_orphans()
    assert record.status == "ok", record.error
    assert record.sequences[0].tokens == undisturbed.sequences[0].tokens == target_only.sequences[0].tokens
    assert [r["process"] for r in record.collected.restarts][:3] == ["draft-0", "verifier", "zygote"]


@pytest.mark.slow
def test_on_the_default_pair_twenty_random_kills_of_a_sampled_run_change_nothing():
    """T = 0.8, seed 11, `--coupling gumbel`: 20 kills of random children - both workers, the verifier and the
    zygote (which takes every child with it), each at least once - each as soon as a few more tokens are
    committed. The text is the undisturbed run's and `ar`'s, every kill is restarted and recorded, and no
    process is left. `--max-restarts 10`: the default (3 within 5 s) would rightly give up on a zygote
    killed twice while its children load."""
    prompts = ["Name three colours and say why the sky is blue.", "Write three short steps to make a cup of tea."]
    settings = dict(workers=2, max_new_tokens=160, temperature=0.8, coupling="gumbel", seed=11)
    rng = random.Random(11)
    plan = ["draft-0", "draft-1", "verifier", "zygote"] + [
        rng.choice(["draft-0", "draft-1", "verifier", "zygote"]) for _ in range(16)]
    rng.shuffle(plan)
    killed: list[str] = []
    with Engine(RunConfig.of(max_restarts=10)) as e:
        undisturbed = e.generate(prompts, **settings)
        target_only = e.generate(prompts, **{**settings, "mode": "ar"})
        job = e.submit(prompts, **settings)
        for n, victim in enumerate(plan):
            committed = sum(map(len, job.collected.tokens.values()))
            deadline = time.monotonic() + 300
            while sum(map(len, job.collected.tokens.values())) < committed + 3:
                assert not job.done(), f"the run ended after {n} kills"
                assert time.monotonic() < deadline, f"nothing committed for 300 s after {n} kills"
                time.sleep(0.01)
            if victim == "zygote":
                (zygote,) = [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE
                             and p.cmdline()[:1] == ["specsched: zygote"]]
                zygote.kill()
            else:  # a worker whose sequence has ended may have been retired: then the verifier instead
                alive = {p["name"] for p in e.processes if p["state"] != "exited"}
                victim = victim if victim in alive else "verifier"
                assert kill(started(e, victim, deadline))
            killed.append(victim)
        record = job.result(timeout=900)
    assert no_orphans()
    assert record.status == "ok", record.error
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    assert [s.tokens for s in record.sequences] == [s.tokens for s in target_only.sequences]
    restarted = [r["process"] for r in record.collected.restarts if "died with the zygote" not in r["why"]]
    assert sorted(restarted) == sorted(killed) and len(killed) == 20
    assert {"draft-0", "draft-1", "verifier", "zygote"} <= set(killed)
