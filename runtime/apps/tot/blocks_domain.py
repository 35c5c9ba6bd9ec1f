"""The Blocksworld domain: blocks named by colour, stacks on a table, one hand, four actions.

A `World` is the stacks (each listed bottom to top) and what the hand holds. `apply` enforces the
restrictions of PlanBench, quoted in `RESTRICTIONS` (the SEED paper's prompt text, verbatim), and an
illegal action raises `IllegalAction` whose message names the restriction it breaks.
Plans, goals and instances live in `blocks_plan.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

RESTRICTIONS = (
    "I can only pick up or unstack one block at a time. "
    "I can only pick up or unstack a block if my hand is empty. "
    "I can only pick up a block if the block is on the table and the block is clear. "
    "A block is clear if the block has no other blocks on top of it and if the block is not picked up. "
    "I can only unstack a block from on top of another block if the block I am unstacking was really on top of "
    "the other block. "
    "I can only unstack a block from on top of another block if the block I am unstacking is clear. "
    "Once I pick up or unstack a block, I am holding the block. "
    "I can only put down a block that I am holding. "
    "I can only stack a block on top of another block if I am holding the block being stacked. "
    "I can only stack a block on top of another block if the block onto which I am stacking the block is clear. "
    "Once I put down or stack a block, my hand becomes empty."
)


class IllegalAction(ValueError):
    """An action the restrictions forbid in the current world; the message says which restriction."""


class Verb(Enum):
    PICK_UP = "pick up"
    PUT_DOWN = "put down"
    STACK = "stack"
    UNSTACK = "unstack"


@dataclass(frozen=True, slots=True)
class Action:
    verb: Verb
    block: str
    target: str | None = None  # the block below, for stack and unstack

    def __str__(self) -> str:
        """The canonical PlanBench sentence, e.g. "unstack the red block from on top of the blue block"."""
        if self.verb is Verb.STACK:
            return f"stack the {self.block} block on top of the {self.target} block"
        if self.verb is Verb.UNSTACK:
            return f"unstack the {self.block} block from on top of the {self.target} block"
        return f"{self.verb.value} the {self.block} block"


@dataclass(frozen=True, slots=True)
class World:
    stacks: tuple[tuple[str, ...], ...]  # bottom to top; sorted, so equal worlds compare (and hash) equal
    hand: str | None = None

    @classmethod
    def of(cls, stacks: list[list[str]] | tuple[tuple[str, ...], ...], hand: str | None = None) -> World:
        return cls(tuple(sorted(tuple(s) for s in stacks if s)), hand)

    @property
    def blocks(self) -> list[str]:
        held = [self.hand] if self.hand else []
        return sorted([b for s in self.stacks for b in s] + held)

    def below(self, block: str) -> str | None:
        """The block under `block`; None when it is on the table or in the hand."""
        for stack in self.stacks:
            if block in stack:
                i = stack.index(block)
                return stack[i - 1] if i else None
        return None

    def on_table(self, block: str) -> bool:
        return any(stack[0] == block for stack in self.stacks)

    def clear(self, block: str) -> bool:
        return any(stack[-1] == block for stack in self.stacks)

    def above(self, block: str) -> str | None:
        for stack in self.stacks:
            if block in stack and stack[-1] != block:
                return stack[stack.index(block) + 1]
        return None


def _lift(world: World, block: str) -> World:
    stacks = [s[:-1] if s[-1] == block else s for s in world.stacks]
    return World.of(stacks, hand=block)


def apply(world: World, action: Action) -> World:
    """The world after `action`; IllegalAction (naming the broken restriction) if it is not allowed."""
    for name in (action.block, action.target):
        if name is not None and name not in world.blocks:
            raise IllegalAction(f"there is no {name} block")
    b, t, verb = action.block, action.target, action.verb.value
    if action.verb in (Verb.PICK_UP, Verb.UNSTACK) and world.hand is not None:
        raise IllegalAction(f"I can only {verb} a block if my hand is empty: I am holding the {world.hand} block")
    if action.verb is Verb.PICK_UP:
        if not world.on_table(b):
            below = world.below(b)
            raise IllegalAction(f"I can only pick up a block on the table: the {b} block is on the {below} block")
        if not world.clear(b):
            above = world.above(b)
            raise IllegalAction(f"I can only pick up a block that is clear: the {above} block is on the {b} block")
        return _lift(world, b)
    if action.verb is Verb.UNSTACK:
        if world.below(b) != t:
            really = f"the {b} block is not on the {t} block"
            raise IllegalAction(f"I can only unstack a block from the block it was really on top of: {really}")
        if not world.clear(b):
            above = world.above(b)
            raise IllegalAction(f"I can only unstack a block that is clear: the {above} block is on the {b} block")
        return _lift(world, b)
    if world.hand != b:
        holding = f"the {world.hand} block" if world.hand else "nothing"
        raise IllegalAction(f"I can only {verb} a block that I am holding: I am holding {holding}")
    if action.verb is Verb.PUT_DOWN:
        return World.of([*world.stacks, (b,)])
    # stack: the held block is never clear, so stacking a block on itself is refused here too
    if not world.clear(t):
        raise IllegalAction(f"I can only stack a block onto a clear block: the {t} block is not clear")
    return World.of([s + (b,) if s[-1] == t else s for s in world.stacks])


def legal_actions(world: World) -> list[Action]:
    """Every action allowed in `world` (in a fixed order, so searches are reproducible)."""
    if world.hand is not None:
        return [Action(Verb.PUT_DOWN, world.hand)] + [Action(Verb.STACK, world.hand, s[-1]) for s in world.stacks]
    return [Action(Verb.PICK_UP, s[0]) if len(s) == 1 else Action(Verb.UNSTACK, s[-1], s[-2]) for s in world.stacks]


# -- reading an action from free text ---------------------------------------------------------------

_NOT_A_NAME = r"(?!(?:the|a|an|block|blocks|top|table|it|on|onto|from|of|off|up|down)\b)"


def _block(name: str) -> str:
    return rf"(?:the\s+)?{_NOT_A_NAME}(?P<{name}>[a-z]+)(?:\s+block)?"


_ONTO = r"(?:on\s+top\s+of|onto|on|upon|atop)"
_OFF = r"(?:from\s+on\s+top\s+of|from\s+top\s+of|from|off\s+of|off)"
_PATTERNS = [
    (Verb.UNSTACK, rf"\bunstack(?:s|ed|ing)?\s+{_block('b')}\s+{_OFF}\s+{_block('t')}"),
    (Verb.STACK, rf"\b(?:stack|put|place)(?:s|ed|ing)?\s+{_block('b')}\s+{_ONTO}\s+{_block('t')}"),
    (Verb.PICK_UP, rf"\bpick(?:s|ed|ing)?(?:\s*-?\s*up)?\s+{_block('b')}"),
    (Verb.PUT_DOWN, rf"\b(?:put|place)(?:s|ting)?(?:\s*-?\s*down)?\s+{_block('b')}\s+(?:down|on\s+the\s+table)\b"),
    (Verb.PUT_DOWN, rf"\b(?:put|place)(?:s|ting)?\s*-?\s*down\s+{_block('b')}"),
]
_COMPILED = [(verb, re.compile(pattern, re.I)) for verb, pattern in _PATTERNS]


def parse_action(text: str) -> Action | None:
    """The first action written in `text`, in any of the usual phrasings; None if there is none.

    "unstack the red block from on top of the blue block", "unstack red from blue", "pick up the yellow
    block", "stack the red block on top of the blue block", "put the red block on the blue block",
    "put down the red block", "put the red block down / on the table". Block names are not checked here
    (the text does not say which blocks exist); `apply` rejects a block that is not in the world.
    """
    best: tuple[int, Action] | None = None
    for verb, pattern in _COMPILED:
        match = pattern.search(text)
        if match is None or (best is not None and match.start() >= best[0]):
            continue
        target = match.group("t").lower() if "t" in pattern.groupindex else None
        best = (match.start(), Action(verb, match.group("b").lower(), target))
    return best[1] if best else None
