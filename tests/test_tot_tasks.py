"""The three ToT tasks behind the Task contract: prompts, thought cleaning, answers, data files."""

from __future__ import annotations

import json

import pytest

from specsched.runtime.apps.tot.blocksworld_task import Blocksworld
from specsched.runtime.apps.tot.creative import Creative
from specsched.runtime.apps.tot.gsm8k import EXAMPLE_QUESTION, Gsm8k
from specsched.runtime.apps.tot.gsm8k import SAMPLES as GSM8K_SAMPLES
from specsched.runtime.apps.tot.rows import RowError
from specsched.runtime.apps.tot.task import Problem, Score
from specsched.runtime.apps.tot.task_registry import TASKS, get_task, load_problems
from specsched.runtime.core.config import ConfigError

GSM_STEP = "48 + 36 = 84 rolls in all."
PASSAGE_THOUGHT = "Plan: A quiet village at night.\n\nPassage: The wind rose. The kettle began to whistle."


# -- prompts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task, state, lead_in",
    [
        (Gsm8k(), [], "Question: A teacher has 5 boxes with 6 pens in each box. She buys 4 more pens. How many pens "
                      "does she have now?"),
        (Creative(), [], "The output is:"),
        (Blocksworld(), ["unstack the blue block from on top of the red block"], "The current action is:"),
    ],
)
def test_thought_prompt_holds_the_problem_and_the_state_and_ends_with_the_lead_in(task, state, lead_in):
    problem = task.samples()[0]
    prompt = task.thought_prompt(problem, state)
    assert problem.text in prompt
    assert all(thought in prompt + task.thought_reply(problem, state) for thought in state)
    assert prompt.endswith(lead_in)
    assert "<|im_start|>" not in prompt and "<|" not in prompt  # the runtime applies the chat template


@pytest.mark.parametrize(
    "task, state, shown, lead_in",
    [
        (Gsm8k(), [GSM_STEP], ["The next step is: 48 + 36 = 84 rolls in all."], "The number is:"),
        (Creative(), [PASSAGE_THOUGHT], ["The wind rose. The kettle began to whistle."], "The coherency score is:"),
        (
            Blocksworld(),
            ["unstack the blue block from on top of the red block", "put down the blue block"],
            ["unstack the blue block from on top of the red block\nput down the blue block"],
            "The evaluation is:",
        ),
    ],
)
def test_eval_prompt_shows_the_new_state(task, state, shown, lead_in):
    problem = task.samples()[0]
    prompt = task.eval_prompt(problem, state)
    assert all(part in prompt for part in shown)
    assert prompt.endswith(lead_in)


def test_gsm8k_eval_prompt_separates_earlier_steps_from_the_new_one():
    task, problem = Gsm8k(), Gsm8k().samples()[0]
    prompt = task.eval_prompt(problem, [GSM_STEP, "84 / 6 = 14 bags."])
    assert problem.text in prompt
    assert f"The steps so far:\nStep 1: {GSM_STEP}\nThe next step is: 84 / 6 = 14 bags.\n" in prompt


def test_gsm8k_shows_a_worked_example_and_opens_the_reply_at_the_next_step():
    """The 135M model writes one calculation when the reply already holds the steps so far and "Step k:"."""
    task, problem = Gsm8k(), Gsm8k().samples()[0]
    prompt = task.thought_prompt(problem, [GSM_STEP])
    assert prompt.index(EXAMPLE_QUESTION) < prompt.index(problem.text)  # the example first, with its worked steps
    assert "Step 1: 3 * 4 = 12 apples in the boxes.\nStep 2: 12 + 2 = 14 apples in all.\nAnswer: 14" in prompt
    assert task.thought_reply(problem, []) == "Step 1:"
    assert task.thought_reply(problem, [GSM_STEP]) == f"Step 1: {GSM_STEP}\nStep 2:"
    assert task.answer_reply(problem, [GSM_STEP, "84 / 6 = 14 bags."]) == (
        f"Step 1: {GSM_STEP}\nStep 2: 84 / 6 = 14 bags.\nAnswer:")


@pytest.mark.parametrize(
    "state, verdict",
    [
        (["5 * 6 = 30 pens in the boxes."], True),
        (["5 * 6 = 30 pens.", "30 + 4 = 34 pens in all."], True),
        (["5 * 6 = 30 pens.", "30 + 4 = 43 pens in all."], False),  # a wrong sum
        (["A teacher has 5 boxes with 6 pens in each box."], None),  # nothing to check
        ([""], False),  # the model wrote nothing on the step's line
        (["5 * 6 = 30 pens.", "5 * 6 = 30 pens."], False),  # a repeated step takes the chain no further
    ],
)
def test_gsm8k_checks_the_new_steps_arithmetic(state, verdict):
    task = Gsm8k()
    assert task.check_thought(task.samples()[0], state) is verdict


def test_creative_prompt_carries_the_four_sentences():
    problem = Creative().samples()[1]
    prompt = Creative().thought_prompt(problem, [])
    assert all(sentence in prompt for sentence in problem.data["sentences"])


def test_blocksworld_prompts_quote_the_restrictions_and_the_statement():
    task = Blocksworld()
    problem = task.samples()[2]
    for prompt in (task.thought_prompt(problem, []), task.eval_prompt(problem, ["pick up the red block"])):
        assert "I can only pick up or unstack a block if my hand is empty." in prompt
        assert prompt.count(problem.text) == 1
    assert "(no actions yet)" in task.thought_prompt(problem, [])


# -- cleaning thoughts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, kept",
    [
        (" 48 + 36 = 84 rolls in all.\nStep 2: 84 / 6 = 14 bags.\nAnswer: 14", GSM_STEP),  # the next steps: not its
        ("\n  48 + 36 =  84 rolls in all.\n", GSM_STEP),
        (" Step 1: 48 + 36 = 84 rolls in all.", GSM_STEP),  # the label the reply opened with, written again
        ("\n\n", ""),
    ],
)
def test_gsm8k_clean_thought_keeps_one_step(raw, kept):
    assert Gsm8k().clean_thought(raw) == kept


@pytest.mark.parametrize(
    "raw, kept",
    [
        ("Plan: A quiet village at night.\nPassage: The wind rose. The kettle began to whistle.", PASSAGE_THOUGHT),
        (
            "The output is:\n**Plan:** A quiet village at night.\n\n**Passage:**\nThe wind rose. The kettle began to "
            "whistle.\n\nPlan: another story",
            PASSAGE_THOUGHT,
        ),
        ("The wind rose. The kettle began to whistle.", "Passage: The wind rose. The kettle began to whistle."),
    ],
)
def test_creative_clean_thought_keeps_the_first_plan_and_passage(raw, kept):
    assert Creative().clean_thought(raw) == kept


@pytest.mark.parametrize(
    "raw, kept",
    [
        (
            "Unstack the blue block from the red block.\nThen put it down.",
            "unstack the blue block from on top of the red block",
        ),
        (" pick up the red block\npick up the blue block", "pick up the red block"),
        ("\n\nI think we should wait.\nOr not.", "I think we should wait."),
        ("", ""),
    ],
)
def test_blocksworld_clean_thought_keeps_one_canonical_action(raw, kept):
    assert Blocksworld().clean_thought(raw) == kept


# -- scores and answers -----------------------------------------------------------------------------


def test_each_task_reads_its_evaluator_scale():
    assert Gsm8k().parse_score("The number is: 9") == Score(9.0, True)
    assert Creative().parse_score("Thus the coherency score is 4") == Score(4.0, True)
    assert Blocksworld().parse_score(" bad") == Score(1.0, True)
    assert Blocksworld().parse_score(" good") == Score(10.0, True)
    for task in (Gsm8k(), Creative(), Blocksworld()):
        assert task.parse_score("no idea") == Score(task.lowest, False)


def test_gsm8k_sample_answers_recomputed():
    assert [answer for _, answer in GSM8K_SAMPLES] == [
        str(5 * 6 + 4),
        str((48 + 36) // 6),
        str(2 * (5 * 12 + 2 * 20)),
        str(7 * 15 - 23 + 16),
        str(20 - (3 * 4 + 2 * 3 // 2)),
        str((27 - 9 + 14) // 2),
        str(5 * 8 * 2 * 7),
    ]


def test_gsm8k_final_answer_and_correct():
    task = Gsm8k()
    problem = Problem("p", "How many bags?", answer="14")
    assert task.needs_answer
    assert task.final_answer(problem, [GSM_STEP], " 14 bags.") == "14"
    assert task.final_answer(problem, [GSM_STEP], "The answer is 14.0") == "14"
    # the model goes on to a question of its own: the answer is on the first line
    assert task.final_answer(problem, [GSM_STEP], " 14\n\nQuestion: Ben has 3 cats.") == "14"
    # no number in the final generation: the number the last step reached
    assert task.final_answer(problem, [GSM_STEP], "I cannot say.") == "84"
    assert task.correct(problem, "14") is True
    assert task.correct(problem, "14.0") is True
    assert task.correct(problem, "84") is False
    assert task.correct(problem, "I cannot say.") is False
    assert task.correct(Problem("q", "?"), "14") is None


def test_creative_answer_is_the_best_passage():
    task = Creative()
    assert not task.needs_answer
    problem = task.samples()[0]
    assert task.final_answer(problem, [PASSAGE_THOUGHT], None) == "The wind rose. The kettle began to whistle."
    assert task.correct(problem, "anything") is None


def test_blocksworld_answer_is_the_plan_and_correct_means_it_solves():
    task = Blocksworld()
    problem = task.samples()[0]  # red on blue, orange alone; goal: orange on red
    backwards = [
        "unstack the red block from on top of the blue block",
        "stack the red block on top of the orange block",
    ]
    plan = ["pick up the orange block", "stack the orange block on top of the red block", "put down the blue block"]
    assert not task.needs_answer
    answer = task.final_answer(problem, plan, None)
    assert answer == "\n".join(plan)
    assert task.correct(problem, answer) is True  # the third action comes after the goal
    assert task.correct(problem, "\n".join(backwards)) is False  # legal, but red ends on orange
    assert task.correct(problem, "pick up the orange block") is False
    assert "holding" in task.check(problem, "put down the red block").reason


# -- data files -------------------------------------------------------------------------------------


def test_gsm8k_load_reads_the_gold_answer_after_the_marker():
    rows = [
        {"question": "Ann has 3 apples and buys 4 more. How many now?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
        {"id": "x9", "question": "A $1,200 bike at half price?", "answer": "1200 / 2 = 600\n#### 600"},
    ]
    problems = Gsm8k().load(rows)
    assert [(p.id, p.answer) for p in problems] == [("gsm8k-1", "7"), ("x9", "600")]
    assert problems[0].text == rows[0]["question"]


@pytest.mark.parametrize(
    "row, phrase",
    [
        ({"question": "How many?"}, '"answer"'),
        ({"question": "", "answer": "#### 3"}, '"question"'),
        ({"question": "How many?", "answer": "It is 3."}, "####"),
    ],
)
def test_gsm8k_load_refuses_bad_rows(row, phrase):
    with pytest.raises(RowError, match=phrase) as error:
        Gsm8k().load([{"question": "ok?", "answer": "#### 1"}, row])
    assert error.value.index == 1


def test_creative_load_takes_sentences_or_one_input():
    four = ["A.", "B.", "C.", "D."]
    problems = Creative().load([{"sentences": four}, {"input": "A. B. C. D.", "id": "t1"}])
    assert [(p.id, p.text) for p in problems] == [("creative-1", "A. B. C. D."), ("t1", "A. B. C. D.")]
    assert problems[0].data == {"sentences": four}
    with pytest.raises(RowError, match="exactly 4"):
        Creative().load([{"sentences": four[:3]}])
    with pytest.raises(RowError, match='"sentences"'):
        Creative().load([{"text": "A. B. C. D."}])


def test_blocksworld_load_builds_the_statement():
    (problem,) = Blocksworld().load([{"init": [["red", "blue"], ["yellow"]], "goal": [["yellow", "blue"]]}])
    assert problem.text.endswith("My goal is to have that the yellow block is on top of the blue block.")
    assert Blocksworld().correct(problem, "pick up the yellow block\nstack the yellow block on top of the blue block")
    with pytest.raises(RowError, match="row 1"):
        Blocksworld().load([{"init": [["red"]], "goal": [["red", "red"]]}])


def write(tmp_path, lines: list[str]):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_problems_reads_jsonl(tmp_path):
    rows = [{"question": "One?", "answer": "#### 1"}, {"question": "Two?", "answer": "#### 2"}]
    path = write(tmp_path, [json.dumps(rows[0]), "", json.dumps(rows[1])])
    assert [p.answer for p in load_problems(Gsm8k(), path)] == ["1", "2"]


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"question": "One?", "answer": "#### 1"}', "{not json"], "data.jsonl:2: not valid JSON"),
        (
            ['{"question": "One?", "answer": "#### 1"}', "", '["a list"]'],
            "data.jsonl:3: expected a JSON object, got list",
        ),
        (['{"question": "One?", "answer": "#### 1"}', "", '{"question": "Two?"}'], 'data.jsonl:3: "answer" must be'),
        (["", "  "], "data.jsonl: no problems in it"),
    ],
)
def test_load_problems_names_the_file_and_line(tmp_path, lines, message):
    path = write(tmp_path, lines)
    with pytest.raises(ConfigError, match=message):
        load_problems(Gsm8k(), path)


def test_load_problems_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_problems(Gsm8k(), tmp_path / "missing.jsonl")


def test_get_task():
    assert sorted(TASKS) == ["blocksworld", "creative", "gsm8k"]
    assert isinstance(get_task("gsm8k"), Gsm8k)
    with pytest.raises(ConfigError) as error:
        get_task("game24")
    assert str(error.value) == "unknown task 'game24'; choose one of blocksworld, creative, gsm8k"


def test_every_task_ships_samples_with_unique_ids():
    counts = {name: len(get_task(name).samples()) for name in TASKS}
    assert counts == {"gsm8k": 7, "creative": 5, "blocksworld": 5}
    ids = [p.id for name in TASKS for p in get_task(name).samples()]
    assert len(ids) == len(set(ids))
