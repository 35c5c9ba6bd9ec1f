"""Token trees as llama.cpp sequence ids, checked against llama.cpp's own rules on a model of its KV cache.

The model (``KV``) keeps what llama.cpp keeps per cell: a position and a set of sequence ids. A token
attends to the cells that hold its *first* sequence id at a position <= its own (llama-kv-cache.cpp,
set_input_kq_mask), and ``seq_rm``/``seq_cp`` edit the id sets. Random trees must see exactly their
ancestors, and after ``keep`` the base id must hold exactly the kept path, with no other id left.
"""

from __future__ import annotations

import random

import pytest

from specsched.runtime.backends.llama_seqs import OutOfSequenceIds, SeqIds, plan_keep, plan_tree


class KV:
    def __init__(self) -> None:
        self.cells: list[dict] = []  # {"pos", "seqs", "entry"}: entry = the cache index it holds

    def rm(self, seq: int, p0: int, p1: int) -> None:
        hi = float("inf") if p1 < 0 else p1
        for c in self.cells:
            if seq in c["seqs"] and max(p0, 0) <= c["pos"] < hi:
                c["seqs"].discard(seq)
        self.cells = [c for c in self.cells if c["seqs"]]

    def cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        for c in self.cells:
            if src in c["seqs"] and p0 <= c["pos"] < p1:
                c["seqs"].add(dst)

    def run(self, ops) -> None:
        for op in ops:
            (self.rm if op[0] == "rm" else self.cp)(*op[1:])

    def seq(self, s: int) -> list[int]:
        return sorted(c["entry"] for c in self.cells if s in c["seqs"])


def ancestors(i: int, parents: list[int]) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return sorted(out)


def forward(kv: KV, parents: list[int], base_len: int, base: int, ids: SeqIds):
    """Plan entries base_len.. , write their cells as llama_decode would; return (plan, visible sets)."""
    plan = plan_tree(parents[base_len:], base_len, base, ids)
    for seq, fork in plan.forks:
        kv.cp(base, seq, 0, fork)
    depth = [len(ancestors(i, parents)) - 1 for i in range(len(parents))]
    for j, seqs in enumerate(plan.seq_sets):
        kv.cells.append({"pos": depth[base_len + j], "seqs": set(seqs), "entry": base_len + j})
    seen = []
    for j, seqs in enumerate(plan.seq_sets):
        p = depth[base_len + j]
        seen.append(sorted(c["entry"] for c in kv.cells if seqs[0] in c["seqs"] and c["pos"] <= p))
    return plan, seen


def random_tree(rng: random.Random, base_len: int, n: int) -> list[int]:
    """A committed chain of base_len, then n entries hung on it or on each other (topological order)."""
    parents = list(range(-1, base_len - 1))
    for i in range(n):
        # mostly on the last committed entry (drafts), sometimes earlier (a lane re-hung), else on a new node
        choice = rng.random()
        if choice < 0.3 or i == 0:
            parents.append(base_len - 1)
        elif choice < 0.4 and base_len > 1:
            parents.append(rng.randrange(base_len - 1))
        else:
            parents.append(rng.randrange(base_len, base_len + i))
    return parents


@pytest.mark.parametrize("seed", range(40))
def test_every_node_sees_exactly_its_ancestors_and_keep_leaves_one_path(seed):
    rng = random.Random(seed)
    base_len, n = rng.randint(1, 6), rng.randint(1, 12)
    ids = SeqIds(64)
    ids.take()  # a live sequence elsewhere holds an id (never touched here)
    base = ids.take()
    kv = KV()
    kv.cells = [{"pos": i, "seqs": {base}, "entry": i} for i in range(base_len)]
    parents = random_tree(rng, base_len, n)
    plan, seen = forward(kv, parents, base_len, base, ids)
    for j, visible in enumerate(seen):
        assert visible == ancestors(base_len + j, parents), f"node {base_len + j}"

    target = rng.randrange(len(parents))  # keep the path to any entry, committed or new
    path = ancestors(target, parents)
    free_before = ids.in_use
    keep = plan_keep(path, parents, base_len, base, plan)
    kv.run(keep.ops)
    for s in keep.released:
        ids.give(s)
    assert kv.seq(base) == path
    assert all(c["seqs"] == {base} for c in kv.cells), "another id still holds a cell"
    assert ids.in_use == free_before - len(keep.released) == 2


def test_a_plain_chain_needs_no_extra_id():
    ids = SeqIds(4)
    plan = plan_tree([2, 3, 4], 3, 0, ids)
    assert plan.forks == [] and plan.seq_sets == [[0], [0], [0]] and ids.in_use == 0


def test_running_out_of_ids_gives_back_what_it_took():
    ids = SeqIds(3)
    base = ids.take()
    with pytest.raises(OutOfSequenceIds, match="sequence ids are in use"):
        plan_tree([0, 0, 0, 0], 1, base, ids)  # four leaves: base + 3 more, only 2 free
    assert ids.in_use == 1


def test_keep_refuses_what_is_not_a_path():
    with pytest.raises(ValueError, match="root-first path"):
        plan_keep([0, 2], [-1, 0, 1], 3, 0, None)
