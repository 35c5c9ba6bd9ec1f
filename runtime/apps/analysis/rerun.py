"""A record against its rerun: what produced each (provenance), and where their outputs part.

A `specsched run --json` record holds its whole config and every sequence's tokens, so it can be run
again and checked: greedy output is a function of the models and the prompt (lossless: the target's own
decoding), and sampled output of the seed too (each sequence draws from its own stream, whatever the
schedule). A tree's record (`run --task ... --json`, the main job's) holds its config, its search and
each tree's problem and nodes: the rerun builds the same trees, node for node. Outputs that part say
which of those differs, or where floating point broke a tie another way (docs/lossless.md) -
which is why the provenance is compared first.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ...core.config import ConfigError, RunConfig, known_settings
from ...core.config_checks import is_int, is_number, shown
from ...engine.record import record_kind
from ..tot.search import SearchConfig
from ..tot.task import Problem

STATUSES = ("ok", "failed", "interrupted")  # a record's status: only an ok record's sequences are whole

# what a record's provenance says, as (row, path into the block, whether a difference there can change greedy
# tokens: other weights, other arithmetic); the rows `rerun` prints
PROVENANCE_ROWS = (
    ("target weights (sha256)", ("models", "target", "sha256"), True),
    ("draft weights (sha256)", ("models", "draft", "sha256"), True),
    ("dtype", ("models", "target", "dtype"), True),
    ("specsched", ("software", "versions", "specsched"), False),
    ("git commit", ("software", "git_commit"), False),
    ("uncommitted changes", ("software", "git_dirty"), False),
    ("torch", ("software", "versions", "torch"), True),
    ("transformers", ("software", "versions", "transformers"), False),
    ("CPU", ("machine", "cpu_model"), False),
    ("CPU flags", ("machine", "cpu_flags"), True),
    ("torch kernels", ("machine", "torch_cpu_capability"), True),
    ("GPU", ("gpu", "name"), True),
)
NUMERIC_ROWS = {name for name, _, numeric in PROVENANCE_ROWS if numeric}


@dataclass(frozen=True, slots=True)
class Recorded:
    config: RunConfig
    tokens: dict[int, list[int]]   # sequence id -> the tokens the record holds
    status: str                    # one of STATUSES
    provenance: dict
    tokens_per_s: float | None


@dataclass(frozen=True, slots=True)
class Parting:
    """Where one sequence's rerun leaves the record: at token `at` (recorded, now: None past an end)."""
    seq: int
    at: int
    recorded: int | None
    now: int | None


@dataclass(frozen=True, slots=True)
class RecordedTrees:
    config: RunConfig              # the tree's base config (each phase's is derived from it)
    search: dict                   # SearchConfig's fields
    task: str
    problems: list[dict]           # Problem's fields, one per tree
    trees: list[list[dict]]        # each tree's nodes, as recorded
    statuses: list[str]            # each tree's: ok | failed | interrupted (its nodes then a prefix)
    provenance: dict


@dataclass(frozen=True, slots=True)
class NodeParting:
    """Where a rebuilt tree leaves the record: its node `node` differs in `what` (or one tree has no such node)."""
    tree: int
    node: int
    what: str


NODE_FIELDS = ("parent", "level", "raw", "evaluation", "score", "kept")  # what a node is made of


def load_record(path: str) -> Recorded | RecordedTrees:
    """A `specsched run --json` (or `--trace`) record, or a tree's: ConfigError, in one line, for anything else."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested past the parser's depth
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    kind = record_kind(data)
    if kind == "several":
        raise ConfigError(f"{path} is a compare, bench or workload record; rerun takes one run's record "
                          "(`specsched run --json PATH`)")
    if kind == "tree":
        return _trees(path, data)
    if kind is None:
        raise ConfigError(f"{path}: not a specsched record (no config and sequences)")
    config = _config(path, data["config"])
    status = data.get("status", "ok")
    if status not in STATUSES:
        raise ConfigError(f"{path}: a record's status is one of {', '.join(STATUSES)}, got {shown(status)}")
    tokens = _sequences(path, data["sequences"], config.n_sequences, whole=status == "ok")
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
    rate = metrics.get("tokens_per_s")
    provenance = data.get("provenance")
    return Recorded(config, tokens, status, provenance if isinstance(provenance, dict) else {},
                    float(rate) if is_number(rate) and 0 < rate < math.inf else None)


def _sequences(path: str, sequences: list, n: int, *, whole: bool) -> dict[int, list[int]]:
    """Each sequence's tokens by id: the config's sequences 0..n-1, each once (every one of them in a record of
    a run that finished), each a list of token ids."""
    tokens: dict[int, list[int]] = {}
    for s in sequences:
        if not (isinstance(s, dict) and is_int(s.get("id")) and isinstance(s.get("tokens"), list)
                and all(is_int(t) and t >= 0 for t in s["tokens"])):
            raise ConfigError(f"{path}: its sequences are not a record's (each an integer id and a list of token "
                              f"ids), got {shown(s)}")
        if not 0 <= s["id"] < n or s["id"] in tokens:
            what = "appears twice" if s["id"] in tokens else "is not one its config runs"
            raise ConfigError(f"{path}: sequence {s['id']} {what} (sequences 0..{n - 1}, each once)")
        tokens[s["id"]] = s["tokens"]
    if whole and len(tokens) != n:
        missing = sorted(set(range(n)) - set(tokens))
        raise ConfigError(f"{path}: its config runs {n} sequences and the record of a run that finished holds "
                          f"{len(tokens)} (sequence {missing[0]} is missing)")
    return tokens


def _config(path: str, settings: dict) -> RunConfig:
    known = known_settings()
    if unknown := sorted(set(settings) - known):
        raise ConfigError(f"{path} was written by another specsched: this one has no setting "
                          f"{', '.join(map(repr, unknown))}")
    try:
        return RunConfig.from_dict(settings)
    except ConfigError as exc:
        raise ConfigError(f"{path}: its config is refused here: {exc}") from None


def _trees(path: str, data: dict) -> RecordedTrees:
    config = _config(path, data["config"])
    try:
        search = dict(data["search"])
        SearchConfig(**search)
        trees = data["trees"]
        tasks = {t["task"] for t in trees}
        problems = [dict(t["problem"]) for t in trees]
        for p in problems:
            Problem(**p)
        nodes = [[{f: n[f] for f in NODE_FIELDS} for n in t["nodes"]] for t in trees]
        statuses = [str(t.get("status", "ok")) for t in trees]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: its trees are not a tree record's ({type(exc).__name__}: {exc})") from None
    if len(tasks) != 1:
        raise ConfigError(f"{path}: a tree record holds trees of one task, this one {len(tasks)}")
    return RecordedTrees(config, search, tasks.pop(), problems, nodes, statuses, data.get("provenance") or {})


def tree_partings(recorded: RecordedTrees, now: list[list[dict]]) -> list[NodeParting]:
    """Each rebuilt tree's first node that is not the record's. A tree the record did not finish holds a
    prefix of its nodes: the rebuilt one must begin with them."""
    out = []
    for i in range(max(len(recorded.trees), len(now))):
        old, new = (recorded.trees[i] if i < len(recorded.trees) else []), (now[i] if i < len(now) else [])
        if i < len(recorded.statuses) and recorded.statuses[i] != "ok":
            new = new[:len(old)]
        for j in range(max(len(old), len(new))):
            if j >= len(old) or j >= len(new):
                out.append(NodeParting(i, j, "only in the record" if j >= len(new) else "only in the rerun"))
                break
            if (what := next((f for f in NODE_FIELDS if old[j][f] != new[j][f]), None)) is not None:
                out.append(NodeParting(i, j, what))
                break
    return out


def provenance_rows(recorded: dict, now: dict) -> list[tuple[str, str, str, bool]]:
    """(row, recorded, now, same) for each row either block has."""
    rows = []
    for name, path, _ in PROVENANCE_ROWS:
        a, b = _at(recorded, path), _at(now, path)
        if a is None and b is None:
            continue
        digest = path[-1] in ("sha256", "git_commit")
        rows.append((name, _shown(a, digest), _shown(b, digest), a == b))
    return rows


def partings(recorded: Recorded, now: dict[int, list[int]]) -> list[Parting]:
    """Each sequence whose rerun leaves the record. A record that did not finish (interrupted, failed) holds
    a prefix of each sequence: the rerun must begin with it."""
    out = []
    for seq in sorted(set(recorded.tokens) | set(now)):
        old, new = recorded.tokens.get(seq, []), now.get(seq, [])
        if recorded.status != "ok":
            new = new[:len(old)]
        at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        if at < max(len(old), len(new)):
            out.append(Parting(seq, at, old[at] if at < len(old) else None, new[at] if at < len(new) else None))
    return out


def _at(block: dict, path: tuple[str, ...]):
    for key in path:
        block = block.get(key) if isinstance(block, dict) else None
    return block


def _shown(value, digest: bool) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return " ".join(map(str, value)) or "-"
    return str(value)[:12] if digest else str(value)  # a sha256 or a git commit: its first 12 digits
