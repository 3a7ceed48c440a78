"""The Markdown summary of a run: one table of every measurement, then the caveats."""

from __future__ import annotations

from app.bench.machine import short_description


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def markdown(results: dict) -> str:
    """Return the Markdown report of ``results`` (as written to results.md)."""
    settings = results.get("settings", {})
    model = results.get("model", {})
    run = "quick" if settings.get("quick") else "full"
    lines = [
        f"Machine: {short_description(results.get('machine', {}))}. "
        f"Model: {model.get('shape') or model.get('folder')} "
        f"({model.get('model_type')}, {model.get('num_layers')} layers, "
        f"{model.get('activation_dtype')}"
        + (", random weights" if model.get("random_weights") else "")
        + f"). Run: {run}, {results.get('elapsed_s', 0):.0f} s.",
        "",
        "| Measurement | Median | Spread | Target | Held |",
        "|---|---|---|---|---|",
    ]
    skipped: list[str] = []
    failed: list[str] = []
    notes: list[str] = []
    for name, part in results.get("parts", {}).items():
        if part["status"] == "skipped":
            skipped.append(f"- `{name}` ({part['title']}): {part['note']}")
            continue
        if part["status"] == "failed":
            failed.append(f"- `{name}` ({part['title']}): {part['error']}")
            continue
        for row in part["rows"]:
            lines.append(
                "| "
                + " | ".join(
                    _cell(row[k])
                    for k in ("measurement", "result", "spread", "target", "held")
                )
                + " |"
            )
        notes.extend(f"- {name}: {note}" for note in part.get("notes", []))
    if failed:
        lines += ["", "Failed:", *failed]
    if skipped:
        lines += ["", "Skipped:", *skipped]
    if notes:
        lines += ["", "Notes:", *notes]
    elapsed = results.get("part_elapsed_s", {})
    if elapsed:
        lines += [
            "",
            "Part runtimes: "
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in elapsed.items())
            + ".",
        ]
    return "\n".join(lines) + "\n"
