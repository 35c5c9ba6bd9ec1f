"""MkDocs hooks: the site's home page is README.md and its benchmarks page BENCHMARKS.md, rewritten for the site.

Both files stay at the repository's top (where GitHub and PyPI show them); their links are written from there
(`docs/engine.md`), the chapters' from docs/ (`../BENCHMARKS.md#...`). Here each is rewritten to the site's
paths, so one text serves both.

The API reference reads the installed `specsched`. Its packages live in folders of other names (setuptools'
package-dir: `specsched.runtime` is runtime/, the root package bin/_package/), which mkdocstrings' finder does not
follow through an editable install, so the folders the import system resolves are linked into build/docs-api/ as
the package's own tree, and mkdocstrings reads them there (mkdocs.yml: `paths`).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent


def _link_installed_package() -> None:
    tree = ROOT / "build" / "docs-api" / "specsched"
    shutil.rmtree(tree.parent, ignore_errors=True)
    tree.mkdir(parents=True)
    root = importlib.util.find_spec("specsched")
    if root is None:
        raise SystemExit('specsched is not installed: pip install -e ".[docs]"')
    for entry in Path(root.submodule_search_locations[0]).iterdir():
        if entry.suffix == ".py":
            (tree / entry.name).symlink_to(entry)
    for name in ("runtime", "workers", "scheduler", "policies"):
        spec = importlib.util.find_spec(f"specsched.{name}")
        (tree / name).symlink_to(Path(spec.submodule_search_locations[0]), target_is_directory=True)


_link_installed_package()  # at import: before mkdocstrings (a plugin, configured before hooks) reads its paths


def _from_top(text: str, docs_dir: Path) -> str:
    text = text.replace("[`docs/`](docs/)", "`docs/`")
    text = text.replace("](docs/", "](").replace("](BENCHMARKS.md", "](benchmarks.md")
    return text


def on_files(files, config):
    docs_dir = Path(config["docs_dir"])
    readme = _from_top((ROOT / "README.md").read_text(encoding="utf-8"), docs_dir)
    files.append(File.generated(config, "index.md", content=readme))
    bench = _from_top((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"), docs_dir)
    files.append(File.generated(config, "benchmarks.md", content=bench))
    for image in re.findall(r"!\[[^]]*\]\((benchmarks/[^)]+)\)", bench):  # the plots BENCHMARKS.md shows
        files.append(File.generated(config, image, abs_src_path=str(ROOT / image)))
    return files


def on_page_markdown(markdown, page, config, files):
    return markdown.replace("](../BENCHMARKS.md", "](benchmarks.md")
