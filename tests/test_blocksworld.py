"""The Blocksworld domain: hand-checked plans through the validator, action phrasings, the generator."""

from __future__ import annotations

import pytest

from specsched.runtime.apps.tot.blocks_domain import Action, IllegalAction, Verb, World, apply, parse_action
from specsched.runtime.apps.tot.blocks_plan import Instance, generate, optimal_plan, validate
from specsched.runtime.apps.tot.blocksworld_task import DEMO, DEMO_EVALUATIONS, DEMO_THOUGHT, Blocksworld

# A: blue on red, yellow alone; goal: red on yellow, blue on red (a tower yellow-red-blue).
A = Instance.from_json({"init": [["red", "blue"], ["yellow"]], "goal": [["red", "yellow"], ["blue", "red"]]})
# B: three blocks on the table; goal: orange on blue.
B = Instance.from_json({"init": [["blue"], ["orange"], ["red"]], "goal": [["orange", "blue"]]})
# C: a tower white-green-red (red on top); goal: white on red.
C = Instance.from_json({"init": [["white", "green", "red"]], "goal": [["white", "red"]]})


def test_statement_reads_like_planbench():
    assert A.statement == (
        "As initial conditions I have that, the blue block is clear, the yellow block is clear, the hand is empty, "
        "the blue block is on top of the red block, the red block is on the table and the yellow block is on the "
        "table.\nMy goal is to have that the red block is on top of the yellow block and the blue block is on top "
        "of the red block."
    )


# -- valid plans, checked by hand -------------------------------------------------------------------

VALID = [
    (
        A,
        [
            "unstack the blue block from on top of the red block",  # blue is on red and clear, hand empty
            "put down the blue block",
            "pick up the red block",  # red is now clear and on the table
            "stack the red block on top of the yellow block",  # yellow is clear
            "pick up the blue block",
            "stack the blue block on top of the red block",  # red is clear: the goal holds
        ],
    ),
    (B, ["pick up the orange block", "stack the orange block on top of the blue block"]),
    (
        C,  # the same kind of plan, in the looser phrasings a model writes
        [
            "Unstack red from green.",
            "put the red block down",
            "1. unstack the green block off the white block",
            "Put down the green block.",
            "I pick up the white block",
            "place the white block on the red block",
        ],
    ),
]


@pytest.mark.parametrize("instance, plan", VALID)
def test_hand_checked_plans_are_valid_and_reach_the_goal(instance, plan):
    check = validate(instance, plan)
    assert (check.valid, check.reached_goal) == (True, True), check.reason


@pytest.mark.parametrize("instance, plan", VALID)
def test_dropping_the_last_action_misses_the_goal(instance, plan):
    check = validate(instance, plan[:-1])
    assert (check.valid, check.reached_goal) == (True, False)
    assert "but" in check.reason


def test_actions_after_the_goal_are_not_run():
    check = validate(B, ["pick up the orange block", "stack the orange block on top of the blue block", "fly away"])
    assert (check.valid, check.reached_goal) == (True, True)
    assert check.reason == "reaches the goal after 2 actions"


def test_legal_plan_that_misses_the_goal_says_what_is_missing():
    check = validate(A, ["unstack the blue block from on top of the red block", "put down the blue block"])
    assert (check.valid, check.reached_goal) == (True, False)
    assert "the red block is not on the yellow block" in check.reason
    assert "the blue block is not on the red block" in check.reason


# -- one invalid plan per restriction ---------------------------------------------------------------

INVALID = [
    (B, ["pick up the orange block", "pick up the red block"], 2, "hand is empty"),  # hand already full
    (A, ["pick up the red block"], 1, "clear"),  # blue is on red
    (A, ["pick up the blue block"], 1, "on the table"),  # blue is clear but on red
    (A, ["unstack the blue block from on top of the yellow block"], 1, "really on top of"),  # it is on red
    (C, ["unstack the green block from on top of the white block"], 1, "clear"),  # red is on green
    (
        C,
        ["unstack the red block from on top of the green block", "stack the red block on top of the white block"],
        2,
        "not clear",
    ),  # green is still on white
    (B, ["put down the red block"], 1, "holding nothing"),
    (B, ["pick up the orange block", "put down the red block"], 2, "holding the orange block"),
    (B, ["stack the red block on top of the blue block"], 1, "holding"),
    (B, ["pick up the orange block", "stack the orange block on top of the orange block"], 2, "not clear"),
    (B, ["pick up the purple block"], 1, "there is no purple block"),
    (B, ["pick up the orange block", "do a little dance"], 2, "cannot read"),
]


@pytest.mark.parametrize("instance, plan, step, phrase", INVALID)
def test_each_broken_restriction_is_reported_at_its_step(instance, plan, step, phrase):
    check = validate(instance, plan)
    assert (check.valid, check.reached_goal) == (False, False)
    assert check.reason.startswith(f"action {step}")
    assert phrase in check.reason


def test_apply_changes_only_what_the_action_moves():
    world = World.of([["red", "blue"], ["yellow"]])
    held = apply(world, Action(Verb.UNSTACK, "blue", "red"))
    assert held == World.of([["red"], ["yellow"]], hand="blue")
    assert apply(held, Action(Verb.STACK, "blue", "yellow")) == World.of([["red"], ["yellow", "blue"]])
    with pytest.raises(IllegalAction):
        apply(held, Action(Verb.PICK_UP, "red"))


# -- reading actions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("unstack the red block from on top of the blue block", Action(Verb.UNSTACK, "red", "blue")),
        ("Unstack the red block from the blue block.", Action(Verb.UNSTACK, "red", "blue")),
        ("unstack red off of blue", Action(Verb.UNSTACK, "red", "blue")),
        ("pick up the yellow block", Action(Verb.PICK_UP, "yellow")),
        ("Pick the yellow block up", Action(Verb.PICK_UP, "yellow")),
        ("pickup yellow", Action(Verb.PICK_UP, "yellow")),
        ("stack the red block on top of the blue block", Action(Verb.STACK, "red", "blue")),
        ("Stack red onto blue", Action(Verb.STACK, "red", "blue")),
        ("put the red block on the blue block", Action(Verb.STACK, "red", "blue")),
        ("put down the red block", Action(Verb.PUT_DOWN, "red")),
        ("put the red block down", Action(Verb.PUT_DOWN, "red")),
        ("Put the red block on the table.", Action(Verb.PUT_DOWN, "red")),
        # the first action in the text wins
        ("2. put down the red block 3. pick up the blue block", Action(Verb.PUT_DOWN, "red")),
        (
            "The current action is: unstack the orange block from on top of the white block",
            Action(Verb.UNSTACK, "orange", "white"),
        ),
    ],
)
def test_parse_action_phrasings(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", ["", "good", "Pick up a block", "I am playing with a set of blocks", "stack it"])
def test_parse_action_finds_nothing_in_text_without_an_action(text):
    assert parse_action(text) is None


def test_canonical_sentences_read_back_as_the_same_action():
    for action in [
        Action(Verb.PICK_UP, "red"),
        Action(Verb.PUT_DOWN, "red"),
        Action(Verb.STACK, "red", "blue"),
        Action(Verb.UNSTACK, "red", "blue"),
    ]:
        assert parse_action(str(action)) == action


# -- instances --------------------------------------------------------------------------------------


def test_optimal_plan_lengths_of_hand_checked_instances():
    assert len(optimal_plan(A)) == 6  # blue off red, red onto yellow, blue onto red: three moves
    assert len(optimal_plan(B)) == 2
    assert len(optimal_plan(C)) == 6  # red and green off, then white onto red


@pytest.mark.parametrize("blocks, length", [(3, 2), (3, 4), (4, 4), (4, 6), (5, 6)])
def test_generated_instances_have_the_asked_optimal_plan(blocks, length):
    for seed in range(3):
        instance = generate(seed, blocks=blocks, plan_length=length)
        assert len(instance.init.blocks) == blocks
        assert not instance.reached(instance.init)
        plan = optimal_plan(instance)
        assert len(plan) == length
        assert validate(instance, [str(a) for a in plan]) == (True, True, f"reaches the goal after {length} actions")


def test_generator_is_seeded():
    assert generate(7, blocks=5) == generate(7, blocks=5)
    assert len({generate(seed, blocks=4).to_json().__repr__() for seed in range(10)}) > 1


def test_generator_refuses_impossible_requests():
    with pytest.raises(ValueError, match="even"):
        generate(0, blocks=4, plan_length=5)
    with pytest.raises(ValueError, match="blocks"):
        generate(0, blocks=2)


@pytest.mark.parametrize(
    "row, phrase",
    [
        ({"init": [["red"]]}, '"goal"'),
        ({"init": [["red", "red"]], "goal": [["red", "red"]]}, "twice"),
        ({"init": [["red"], ["blue"]], "goal": [["green", "red"]]}, "green"),
        ({"init": [["red"], ["blue"]], "goal": [["red", "blue"], ["blue", "red"]]}, "cycle"),
        ({"init": [["red"], ["blue"], ["white"]], "goal": [["red", "blue"], ["white", "blue"]]}, "two on one"),
        ({"init": "red on blue", "goal": [["red", "blue"]]}, "list of stacks"),
    ],
)
def test_bad_instances_are_refused_with_a_reason(row, phrase):
    with pytest.raises(ValueError, match=phrase):
        Instance.from_json(row)


def test_samples_are_solvable_in_their_recorded_optimal_length():
    lengths = []
    for problem in Blocksworld().samples():
        instance = Instance.from_json(problem.data)
        plan = optimal_plan(instance)
        assert len(plan) == problem.data["optimal"]
        assert Blocksworld().correct(problem, "\n".join(str(a) for a in plan))
        lengths.append(len(plan))
    assert min(lengths) == 2 and max(lengths) == 6


def test_demonstration_labels_agree_with_the_planner():
    """A demo is "good" exactly when it is legal and still on a shortest path to the goal."""
    demo = Instance.from_json(DEMO)
    shortest = len(optimal_plan(demo))
    thought_plan, thought_action = DEMO_THOUGHT
    for plan, label in [*DEMO_EVALUATIONS, ([*thought_plan, thought_action], "good")]:
        world = demo.init
        try:
            for step in plan:
                world = apply(world, parse_action(step))
        except IllegalAction:
            on_path = False
        else:
            on_path = len(plan) + len(optimal_plan(Instance(world, demo.goal))) == shortest
        assert label == ("good" if on_path else "bad"), plan
