"""Quality-check results, kept per model identity and probe set (schema migration 3).

`swapless check-quality` and the app's "Check quality" save each report; the doctor,
the preset picker and the model manager read the latest result of every cell for the
model in front of them. A model is known by its `model_identity` (config plus weight
file names, sizes and times), so a replaced model never shows its predecessor's numbers.
A stopped check is saved too, its unfinished cell marked incomplete.
"""

from __future__ import annotations

import json

from app.core.quality.cells import Cell, run_order
from app.core.quality.events import QualityReport
from app.core.quality.metrics import CellResult
from app.core.quality.preset_quality import StoredResult
from app.core.store.base import StoreBase


class QualityResultsMixin(StoreBase):
    """Quality-result methods of `Store`."""

    def save_quality_report(self, report: QualityReport) -> int:
        """Save a check and each of its cells in one transaction; return the check id."""
        with self._writing() as db:
            cursor = db.execute(
                "INSERT INTO quality_checks (model_identity, model_folder, settings_key,"
                " measured_at, seconds, cancelled, reference)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    report.model_identity,
                    report.model_folder,
                    report.settings_key,
                    report.measured_at or self._now(),
                    report.seconds,
                    int(report.cancelled),
                    json.dumps(
                        {
                            "perplexity": report.reference_perplexity,
                            "recall": list(report.reference_recall),
                        }
                    ),
                ],
            )
            check_id = cursor.lastrowid
            assert check_id is not None, "an INSERT always sets lastrowid"
            for result in report.results:
                data = result.to_dict()
                db.execute(
                    "INSERT INTO quality_results (check_id, model_identity, settings_key,"
                    " cell, measured_at, complete, verdict, metrics)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        check_id,
                        report.model_identity,
                        report.settings_key,
                        result.cell.key,
                        report.measured_at or self._now(),
                        int(result.complete),
                        data["verdict"],
                        json.dumps(data),
                    ],
                )
        return check_id

    def latest_quality(self, model_identity: str) -> dict[str, StoredResult]:
        """The latest result of every cell measured on a model.

        A complete measurement beats a later stopped one of the same cell; among
        complete ones the newest wins, whatever its probe set.

        Returns:
            ``Cell.key`` → `StoredResult`, in the grid's run order.
        """
        with self._reading() as db:
            rows = db.execute(
                "SELECT cell, measured_at, settings_key, complete, metrics"
                " FROM quality_results WHERE model_identity = ?"
                " ORDER BY complete DESC, measured_at DESC, id DESC",
                [model_identity],
            ).fetchall()
        latest: dict[str, StoredResult] = {}
        for cell, measured_at, settings_key, _complete, metrics in rows:
            if cell in latest:
                continue
            result = CellResult.from_dict(json.loads(metrics))
            latest[cell] = StoredResult(result, measured_at, settings_key)
        return dict(
            sorted(latest.items(), key=lambda kv: run_order(Cell.from_key(kv[0])))
        )

    def quality_checks(self, model_identity: str) -> list[dict]:
        """Every saved check of a model, newest first (id, time, probes, stopped)."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT id, measured_at, settings_key, seconds, cancelled, reference"
                " FROM quality_checks WHERE model_identity = ?"
                " ORDER BY measured_at DESC, id DESC",
                [model_identity],
            ).fetchall()
        return [
            {
                "id": row[0],
                "measured_at": row[1],
                "settings_key": row[2],
                "seconds": row[3],
                "cancelled": bool(row[4]),
                "reference": json.loads(row[5]),
            }
            for row in rows
        ]
