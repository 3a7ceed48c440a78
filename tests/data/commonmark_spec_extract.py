"""Extract the examples of a CommonMark-style ``spec.txt`` into the JSON the tests read.

The committed files were made with:

    python tests/data/commonmark_spec_extract.py SPEC.txt OUT.json \\
        --source URL --version V --commit SHA [--only-extensions]

from ``spec.txt`` of commonmark/commonmark-spec at tag 0.31.2 and from
``test/spec.txt`` of github/cmark-gfm (GFM spec 0.29, extensions only). An example in
a spec is a fence of 32 backticks followed by ``example``; its Markdown and expected
HTML are separated by a line holding one ``.``, and ``→`` stands for a tab.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

_FENCE = "`" * 32
_HEADING = re.compile(r"^#{1,6} +(.*?)\s*$")


def extract(spec: str, only_extensions: bool = False) -> list[dict]:
    """Return the examples of ``spec`` in order, each with its section.

    Args:
        spec: The text of a ``spec.txt``.
        only_extensions: Keep only sections whose title ends with ``(extension)``.
    """
    examples: list[dict] = []
    section = ""
    lines = spec.split("\n")
    i = 0
    number = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(_FENCE + " example"):
            number += 1
            start = i + 1
            parts: list[list[str]] = [[], []]
            part = 0
            i += 1
            while not lines[i].startswith(_FENCE):
                if lines[i] == "." and part == 0:
                    part = 1
                else:
                    parts[part].append(lines[i])
                i += 1
            markdown, expected = ("\n".join(p).replace("→", "\t") for p in parts)
            if not only_extensions or section.endswith("(extension)"):
                examples.append(
                    {
                        "example": number,
                        "section": section,
                        "kind": line[len(_FENCE + " example") :].strip(),
                        "line": start,
                        "markdown": markdown + "\n" if parts[0] else "",
                        "html": expected + "\n" if parts[1] else "",
                    }
                )
        elif match := _HEADING.match(line):
            section = match.group(1)
        i += 1
    return examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--only-extensions", action="store_true")
    args = parser.parse_args()
    examples = extract(args.spec.read_text(encoding="utf-8"), args.only_extensions)
    document = {
        "source": args.source,
        "version": args.version,
        "commit": args.commit,
        "license": "CC-BY-SA 4.0 (the spec's examples)",
        "examples": examples,
    }
    args.out.write_text(
        json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"{len(examples)} examples -> {args.out}")


if __name__ == "__main__":
    main()
