"""Long-document mode: read a document far longer than the KV cache may grow.

The document is cut into segments (`segmenter`) and read one segment at a time; each
step leaves only its notes, so the KV cache is bounded by one segment plus the notes,
whatever the document's length (`runner`). Qt-free and MLX-free: the engine is used
through its API.

* `reader` turns a file into text, or an `InputError` naming the file;
* `segmenter` cuts text at paragraph, sentence, line or word boundaries;
* `planning` makes the plan before anything runs: segments, context, KV peak and a
  time estimate from the speeds measured here (`speed`, `speed_probe`); `mode` and
  `sizing` decide whole-document or segments, with the numbers; `plan_words` says it;
* `prompts` holds what the model is asked;
* `resume` finds an interrupted reading to continue;
* `runner` runs it all (one `steps` call per segment, `progress` for the bar) and
  streams `events`; `sources` names the segments the answer's points come from.
"""

from app.core.longdoc.events import (
    AnswerChunk,
    ReadingProgress,
    RunFinished,
    RunStarted,
    SegmentFinished,
    SegmentStarted,
)
from app.core.longdoc.plan.mode import COMFORT_SHARE, MODES, ContextNeeds, ModeChoice
from app.core.longdoc.plan.planning import Planner, RunPlan
from app.core.longdoc.reading.reader import DocumentText, read_document
from app.core.longdoc.runner import LongDocumentRunner
from app.core.longdoc.segmenter import Segment, split_segments, truncate_to_tokens

__all__ = [
    "COMFORT_SHARE",
    "MODES",
    "AnswerChunk",
    "ContextNeeds",
    "DocumentText",
    "LongDocumentRunner",
    "ModeChoice",
    "Planner",
    "ReadingProgress",
    "RunFinished",
    "RunPlan",
    "RunStarted",
    "SegmentFinished",
    "SegmentStarted",
    "Segment",
    "read_document",
    "split_segments",
    "truncate_to_tokens",
]
