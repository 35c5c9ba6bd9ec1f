"""ToT-BFS (SEED Algorithm 1): propose in parallel, evaluate in parallel, keep the best b, repeat T times.

    S_0 = {root}
    for i in 1..T:
        S'_i = {[s, z] | s in S_{i-1}, z in G(s, n)}      thought generation: n sequences per kept state
        E_i  = E(S'_i)                                     state evaluation: one sequence per new state
        S_i  = the b states of S'_i with the highest E_i   (after the task's own check; ties: the earlier node)
    answer = G(argmax_{s in S_T} E_T(s), 1)                when the task needs a final generation

Each phase is one run on the runtime in the configured `--mode` and `--policy`: n * b draft workers
for the thoughts (the same prompt per state, sampled - identical thoughts would be useless), one per
new state for the evaluations (different prompts). Every phase gets its own seed, derived from
`--seed`, the level and the phase, so a tree is a pure function of (task, problem, config): identical
across policies always, and across modes when greedy (sampled modes agree in distribution).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ...core.config import RunConfig
from ...core.config_checks import MAX_SEED
from ...core.kinds import MODEL_BACKENDS
from ...engine.record import RunRecord
from .task import Problem, Task
from .tree import ANSWER, EVALUATE, GENERATE, Node, Phase, Tree

RunPhase = Callable[[RunConfig, str], RunRecord]  # (config of the phase, label for the view) -> record
Chat = Callable[[list[dict]], str]  # a conversation -> the text the target reads next (Tokenizer.chat_text)


@dataclasses.dataclass(frozen=True, slots=True)
class SearchConfig:
    thoughts: int = 3  # n: thoughts proposed per kept state
    steps: int | None = None  # T: thought steps; None = the task's own (depth - 1)
    breadth: int = 1  # b: states kept per level
    thought_tokens: int | None = None  # None = the task's limits
    eval_tokens: int | None = None
    answer_tokens: int | None = None
    thought_decoding: str = "sample"  # sample: n sequences per state | beam | dsbd: the n beams of one search


def phase_seed(seed: int, level: int, phase: str) -> int:
    """A distinct seed per phase (the runtime derives per-sequence streams from it), within RunConfig's seeds:
    reduced modulo 2**62, the same seed as modulo 2**63 wherever that one was below 2**62."""
    return (seed * 1_000_003 + level * 3 + (GENERATE, EVALUATE, ANSWER).index(phase)) % MAX_SEED


def phase_config(base: RunConfig, prompts: list[str], max_new: int, seed: int) -> RunConfig:
    """The run of one phase: one sequence (and, in seed mode, one draft worker) per prompt."""
    n = len(prompts)
    priorities = base.priorities if len(base.priorities) in (1, n) else base.priorities[:1]
    return dataclasses.replace(
        base, prompts=list(prompts), workers=n, max_new_tokens=max_new, seed=seed, priorities=list(priorities)
    )


def with_replies(config: RunConfig, replies: list[str], chat: Chat | None) -> RunConfig:
    """The phase with each model's reply opened for it (a task's `thought_reply`): prompt i becomes the chat
    template's text (the assistant's turn opened) followed by reply i, read as it stands; without a template
    (sim, --raw-prompt) the reply follows the prompt on a line of its own."""
    if not any(replies):
        return config
    if config.raw_prompt or chat is None or config.backend not in MODEL_BACKENDS:
        return config.replace(prompts=[f"{p}\n{r}" for p, r in zip(config.prompts, replies)])
    prompts = [chat([{"role": "user", "content": p}]) + r for p, r in zip(config.prompts, replies)]
    return config.replace(prompts=prompts, raw_prompt=True)


def rank(node: Node) -> tuple:
    """How a level's states are ordered, best first: the task's check (passed, none, failed), the score, age."""
    checked = {True: 0, None: 1, False: 2}[node.check]
    return checked, -(node.score or 0.0), node.id


def search(task: Task, problem: Problem, base: RunConfig, cfg: SearchConfig, run_phase: RunPhase,
           chat: Chat | None = None) -> Tree:
    """Build the tree; a failed or interrupted phase ends the search with everything built so far. `chat` renders
    a prompt whose reply the task opens (the engine's `tokenizer.chat_text`)."""
    steps = task.steps if cfg.steps is None else cfg.steps
    tree = Tree(
        task.name,
        problem,
        base.mode,
        base.policy,
        cfg.thoughts,
        steps,
        cfg.breadth,
        nodes=[Node(0, None, 0, kept=True)],
    )
    try:
        _grow(tree, task, problem, base, cfg, run_phase, chat)
    except KeyboardInterrupt:  # between two phases: no process is running, the tree is complete so far
        tree.status, tree.error, tree.stopped_by = "interrupted", "interrupted (Ctrl-C)", "SIGINT"
    return tree


def _grow(tree: Tree, task: Task, problem: Problem, base: RunConfig, cfg: SearchConfig, run_phase: RunPhase,
          chat: Chat | None) -> None:
    steps = tree.steps
    frontier = [0]
    for level in range(1, steps + 1):
        where = f"{task.name} · level {level}/{steps}"
        parents = [p for p in frontier for _ in range(cfg.thoughts)]
        config = phase_config(
            base,
            [task.thought_prompt(problem, tree.state(p)) for p in parents],
            cfg.thought_tokens or task.thought_tokens,
            phase_seed(base.seed, level, GENERATE),
        )
        config = with_replies(config, [task.thought_reply(problem, tree.state(p)) for p in parents], chat)
        if cfg.thought_decoding == "sample":
            texts = _phase(tree, run_phase, config, level, GENERATE, where)
        else:
            texts = _beam_thoughts(tree, run_phase, config, frontier, cfg, level, where)
        new = []
        for parent, text in zip(parents, texts):
            node = Node(len(tree.nodes), parent, level, task.clean_thought(text), text)
            tree.nodes.append(node)
            node.check = task.check_thought(problem, tree.state(node.id))
            new.append(node)
        if tree.status != "ok":
            return
        prompts = [task.eval_prompt(problem, tree.state(n.id)) for n in new]
        texts = _phase(
            tree,
            run_phase,
            phase_config(base, prompts, cfg.eval_tokens or task.eval_tokens, phase_seed(base.seed, level, EVALUATE)),
            level,
            EVALUATE,
            where,
        )
        for node, text in zip(new, texts):
            score = task.parse_score(text)
            node.score, node.score_ok, node.evaluation = score.value, score.ok, text
        if tree.status != "ok":
            return
        best = sorted(new, key=rank)[: cfg.breadth]
        for n in best:
            n.kept = True
        frontier = [n.id for n in best]
    chosen = frontier[0]
    tree.chosen = [n.id for n in tree.path(chosen)]
    state = tree.state(chosen)
    if task.needs_answer:
        prompt = task.answer_prompt(problem, state)
        texts = _phase(
            tree,
            run_phase,
            with_replies(
                phase_config(
                    base, [prompt], cfg.answer_tokens or task.answer_tokens, phase_seed(base.seed, steps + 1, ANSWER)
                ),
                [task.answer_reply(problem, state)],
                chat,
            ),
            steps + 1,
            ANSWER,
            f"{task.name} · answer",
        )
        tree.answer_text = texts[0]
        if tree.status != "ok":
            return
    tree.answer = task.final_answer(problem, state, tree.answer_text)
    tree.correct = task.correct(problem, tree.answer)


def _beam_thoughts(tree: Tree, run_phase: RunPhase, config: RunConfig, frontier: list[int], cfg: SearchConfig,
                   level: int, where: str) -> list[str]:
    """--thought-decoding beam|dsbd (beyond SEED, which lists it as future work): a kept state's n thoughts
    are the n beams of one beam sampling (or search, at T = 0) of its thought prompt, most likely first;
    the beam job's sequences are the kept states."""
    beams = config.replace(prompts=config.prompts[:: cfg.thoughts], workers=len(frontier), mode=cfg.thought_decoding,
        beams=cfg.thoughts, policy="fcfs", priorities=[], tickets=[], max_batch=1, lockstep=False, tree="fixed",
        k_config=[], step_aside="off",
    )
    record = _run_phase(tree, run_phase, beams, level, GENERATE, where)
    texts = []
    for i in range(len(frontier)):
        got = record.collected.beams.get(str(i), {"texts": [], "logprobs": []})
        order = sorted(range(len(got["texts"])), key=lambda k: -got["logprobs"][k])
        state = [got["texts"][k] for k in order]
        texts += (state + [""] * cfg.thoughts)[: cfg.thoughts]  # a run that stopped early: empty thoughts
    return texts


def _phase(tree: Tree, run_phase: RunPhase, config: RunConfig, level: int, name: str, where: str) -> list[str]:
    """Run one phase; its texts (what was verified, even if the run stopped) and its cost go in the tree."""
    return [s.text for s in _run_phase(tree, run_phase, config, level, name, where).sequences]


def _run_phase(tree: Tree, run_phase: RunPhase, config: RunConfig, level: int, name: str, where: str) -> RunRecord:
    record = run_phase(config, f"{where} · {name}")
    m, c = record.metrics, record.collected
    wall = c.finished - c.started if c.finished else m.startup_s + m.wall_s  # `finished` is set on success
    tree.phases.append(
        Phase(
            level,
            name,
            config.n_sequences,
            m.tokens,
            wall,
            m.wall_s,
            m.startup_s,
            m.acceptance_rate,
            m.drafted,
            m.accepted,
            m.verifications,
            record.status,
        )
    )
    if record.status != "ok":
        tree.status, tree.error, tree.stopped_by = record.status, record.error, record.stopped_by
    return record
