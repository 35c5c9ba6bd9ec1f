"""Blocksworld instances and plans: the goal, the PlanBench statement, a validator, an optimal planner
and a seeded instance generator.

An instance as JSON (the `--data` rows of the blocksworld task, and `Problem.data`):

    {"init": [["red", "blue"], ["yellow"]], "goal": [["yellow", "red"]]}

`init` lists the stacks on the table, each from the bottom block to the top one, with the hand empty;
`goal` lists [block, below] pairs, each meaning "the block is on top of the below block" (PlanBench goals
are such conjunctions). Any consistent goal (no block on two blocks, no two blocks on one, no cycle) can
be reached, so a well-formed instance is solvable.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from .blocks_domain import Action, IllegalAction, World, apply, legal_actions, parse_action

COLOURS = ("red", "blue", "orange", "yellow", "white", "green")


def _listing(facts: list[str]) -> str:
    return facts[0] if len(facts) == 1 else ", ".join(facts[:-1]) + " and " + facts[-1]


@dataclass(frozen=True, slots=True)
class Instance:
    init: World
    goal: tuple[tuple[str, str], ...]  # (block, the block it must be on)

    def reached(self, world: World) -> bool:
        return all(world.below(block) == below for block, below in self.goal)

    @property
    def statement(self) -> str:
        """The PlanBench problem text: initial conditions, then the goal."""
        stacks = self.init.stacks
        facts = [f"the {s[-1]} block is clear" for s in stacks] + ["the hand is empty"]
        for s in stacks:  # top down, as PlanBench reads a stack
            facts += [f"the {s[i]} block is on top of the {s[i - 1]} block" for i in range(len(s) - 1, 0, -1)]
        facts += [f"the {s[0]} block is on the table" for s in stacks]
        goal = _listing([f"the {block} block is on top of the {below} block" for block, below in self.goal])
        return f"As initial conditions I have that, {_listing(facts)}.\nMy goal is to have that {goal}."

    def to_json(self) -> dict:
        return {"init": [list(s) for s in self.init.stacks], "goal": [list(pair) for pair in self.goal]}

    @classmethod
    def from_json(cls, data: object) -> Instance:
        """An instance from the JSON shape in the module docstring; ValueError saying what is wrong."""
        if not isinstance(data, dict) or "init" not in data or "goal" not in data:
            raise ValueError('a blocksworld row needs "init" (stacks, bottom first) and "goal" ([block, below] pairs)')
        init, goal = data["init"], data["goal"]
        stacks_ok = all(isinstance(s, list) and s and all(isinstance(b, str) for b in s) for s in init)
        if not isinstance(init, list) or not stacks_ok:
            raise ValueError('"init" must be a list of stacks, each a non-empty list of block names (bottom first)')
        blocks = [b for s in init for b in s]
        if len(set(blocks)) != len(blocks):
            raise ValueError(f'"init" names a block twice: {blocks}')
        if not isinstance(goal, list) or not goal or not all(isinstance(p, list) and len(p) == 2 for p in goal):
            raise ValueError('"goal" must be a non-empty list of [block, below] pairs')
        pairs = tuple((str(a), str(b)) for a, b in goal)
        unknown = sorted({b for pair in pairs for b in pair} - set(blocks))
        if unknown:
            raise ValueError(f'"goal" names blocks not in "init": {", ".join(unknown)}')
        tops, belows = [a for a, _ in pairs], [b for _, b in pairs]
        if len(set(tops)) != len(tops) or len(set(belows)) != len(belows) or any(a == b for a, b in pairs):
            raise ValueError(f'"goal" cannot be reached: a block on two blocks, two on one, or on itself: {goal}')
        under = dict(pairs)
        for start in under:  # following "is on" from any block must reach the table, not loop
            seen, block = set(), start
            while block in under:
                if block in seen:
                    raise ValueError(f'"goal" is a cycle of blocks on each other: {goal}')
                seen.add(block)
                block = under[block]
        return cls(World.of(init), pairs)


class Check(NamedTuple):
    valid: bool  # every action (up to the goal) was legal and readable
    reached_goal: bool
    reason: str


def validate(instance: Instance, plan: list[str] | list[Action]) -> Check:
    """Run `plan` from the initial world. Actions after the goal is first reached are not run: the plan
    has done its job, and a fixed-depth search (6 steps for a 2-step instance) must not be failed for
    what it wrote afterwards. Blank lines are skipped; an unreadable line makes the plan invalid."""
    world = instance.init
    steps = [p for p in plan if not isinstance(p, str) or p.strip()]
    for n, step in enumerate(steps, start=1):
        if instance.reached(world):
            return Check(True, True, f"reaches the goal after {n - 1} actions")
        action = step if isinstance(step, Action) else parse_action(step)
        if action is None:
            return Check(False, False, f"action {n}: cannot read {step.strip()!r} as an action")
        try:
            world = apply(world, action)
        except IllegalAction as e:
            return Check(False, False, f"action {n} ({action}): {e}")
    if instance.reached(world):
        return Check(True, True, f"reaches the goal after {len(steps)} actions")
    missing = [f"the {a} block is not on the {b} block" for a, b in instance.goal if world.below(a) != b]
    return Check(True, False, f"every action is legal, but {_listing(missing)}")


def optimal_plan(instance: Instance, *, max_states: int = 500_000) -> list[Action] | None:
    """A shortest plan, by breadth-first search over worlds; None if none within `max_states` worlds."""
    parent: dict[World, tuple[World, Action] | None] = {instance.init: None}
    frontier = deque([instance.init])
    while frontier:
        world = frontier.popleft()
        if instance.reached(world):
            plan = []
            while parent[world] is not None:
                world, action = parent[world]
                plan.append(action)
            return plan[::-1]
        for action in legal_actions(world):
            after = apply(world, action)
            if after not in parent:
                if len(parent) >= max_states:
                    return None
                parent[after] = (world, action)
                frontier.append(after)
    return None


def _random_stacks(rng: random.Random, blocks: list[str]) -> list[list[str]]:
    order = rng.sample(blocks, len(blocks))
    stacks: list[list[str]] = []
    for block in order:
        if not stacks or rng.random() < 0.4:
            stacks.append([block])
        else:
            rng.choice(stacks).append(block)
    return stacks


def generate(seed: int, *, blocks: int = 4, plan_length: int | None = None, tries: int = 2000) -> Instance:
    """A random solvable instance with `blocks` blocks (3-6), its initial world not already the goal;
    with `plan_length`, one whose optimal plan has exactly that many actions. Same seed, same instance."""
    if not 3 <= blocks <= len(COLOURS):
        raise ValueError(f"blocks must be between 3 and {len(COLOURS)}, got {blocks}")
    if plan_length is not None and (plan_length < 2 or plan_length % 2):
        # the hand starts and ends empty, so every pick-up/unstack is paired with a put-down/stack
        raise ValueError(f"an optimal plan has an even number of actions, at least 2; got {plan_length}")
    rng = random.Random(seed)
    names = list(COLOURS[:blocks])
    for _ in range(tries):
        init = World.of(_random_stacks(rng, names))
        goal = tuple((s[i], s[i - 1]) for s in _random_stacks(rng, names) for i in range(1, len(s)))
        instance = Instance(init, goal)
        if not goal or instance.reached(init):
            continue
        if plan_length is None or len(optimal_plan(instance) or []) == plan_length:
            return instance
    raise ValueError(f"no {blocks}-block instance with an optimal plan of {plan_length} actions in {tries} tries")
