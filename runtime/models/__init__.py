"""Models for specsched: the default target pulled from PyPI, the distilled draft shipped with the package.

Entry points for the runtime (import them from their modules; this package imports nothing heavy):
- `registry.resolve_pair(target, draft, progress=True) -> (target_dir, draft_dir)`
- `draft_model.load_model(path, dtype=None) -> torch.nn.Module` (float32 unless a dtype is given; a transformers
  causal LM, or a `DraftLM` for a distilled draft directory)
- `cli.add_models_parser(subparsers)` for `specsched models pull | list | distill`
- `errors.ModelUnavailable`, `errors.ChecksumMismatch`, `errors.CorruptArchive`
"""
