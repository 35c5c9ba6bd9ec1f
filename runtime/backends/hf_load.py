"""The transformers backend's models, built on this process's placement: the half of hf_pair.py that
imports torch (hf_pair.py checks the pair and reads tokenizers before any of this is imported)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..models.draft_files import is_feature_draft
from ..models.pull import pull
from .feature import FeatureModel
from .hf_model import HFModel
from .placement import Placement

if TYPE_CHECKING:
    from .hf_pair import HFBackend


def target(backend: HFBackend) -> HFModel:
    return HFModel(backend.paths()[0], backend.config.model_dtype, placement=backend.placement())


def draft(backend: HFBackend) -> HFModel | FeatureModel:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if is_feature_draft(Path(backend.paths()[1])):  # reads the target's features from the verdicts
        return FeatureModel(backend.paths()[1], backend.draft_embeddings() or pull())
    return HFModel(backend.paths()[1], backend.config.model_dtype, target_dir=backend.draft_embeddings(),
                   placement=backend.placement())


def placement(device: str) -> Placement:
    return Placement(device)
