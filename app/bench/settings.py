"""Sizes of every measurement for a full and a ``--quick`` run, and the targets.

The sizes were picked from measured part runtimes on the reference machine (2 cores,
no GPU) so that a full run takes under 15 minutes and a quick one under 3; each part's
elapsed time is in results.json to re-check that. `SMOKE` is the test suite's: every
part's code at the least cost, figures that mean nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

DEFAULT_SHAPE = "small"
"""The model built when no ``--model`` is given (see `model_builder.SHAPES`)."""
DEFAULT_MODEL_FOLDER = "bench-small"
"""Its folder under ``SWAPLESS_HOME/models``."""
KV_BITS = (16, 8, 4)


@dataclass(frozen=True)
class BenchSettings:
    """Sizes of one run.

    Attributes:
        quick: True for ``--quick``.
        overhead_pairs: Interleaved engine/mlx-lm pairs.
        overhead_prompt_tokens: Prompt of each overhead run.
        overhead_decode_tokens: Tokens generated per overhead run.
        overhead_kv_bits: KV precision of the overhead comparison.
        kv_token_counts: Context lengths of the KV bytes check (one a multiple of 256,
            one not).
        kv_growth_tokens: Prompt of the "after a turn" KV bytes case; a reply and a
            second prompt extend it.
        reuse_contexts: Second-turn prompt lengths of the turn reuse check.
        reuse_pairs: Interleaved kept/re-prefill pairs per context.
        splice_kept_tokens: Tokens of kept history after the trimmed span.
        splice_dropped_tokens: Tokens of history the trim drops.
        splice_pairs: Interleaved splice/rebuild pairs.
        splice_kl_steps: Greedy steps compared after splice and after rebuild.
        conversation_turns: Scripted turns of the long conversation.
        conversation_max_tokens: Reply length of each turn.
        conversation_max_context: The "auto-trim on" limit.
        speed_contexts: Context lengths of the speed check (prefill, warm turn, decode).
        speed_reps: Repetitions per context and precision.
        speed_decode_tokens: Tokens generated per speed run.
        speed_warm_tokens: New prompt tokens of a warm turn on a filled cache.
        prefix_tokens: Length of the shared prefix of the prefix cache check.
        prefix_pairs: Interleaved cold/memory/disk triples.
        longdoc_tokens: Length of the generated long document (the seed's ~60K; the
            whole reads stop at ``longdoc_budget_s`` and say where, the segmented read
            goes to the end).
        longdoc_segments: Segments it is read in (the seed's: 6).
        longdoc_decode_tokens: Tokens decoded at each measured context length.
        longdoc_budget_s: Wall time one whole read may take; it stops before a step
            predicted to pass it, and says where.
        ui_seconds: Streaming time of the UI lateness check.
        limits_read_bytes: Size of the array summed to measure read bandwidth.
        limits_gemm_size: Side of the square matrices of the GEMM peak.
        limits_row_matrix: Shape of the one-row matmul's matrix (a decode lm_head).
        limits_repetitions: Repetitions of each limit (the best counts).
        server_pairs: Interleaved server/engine decode pairs (the prompt and reply
            sizes are the engine-overhead ones).
        server_reuse_tokens: First-request message of the server reuse check.
        server_reuse_pairs: Interleaved reuse/fresh pairs.
        arch_context_tokens: Second-turn context of the per-architecture check.
        arch_pairs: Kept/fresh pairs per architecture.
        arch_names: Architectures measured (empty: every one `make-model` builds).
        recall_cases: Conversations per recall cell (0: the part's own count, 12
            quick and 200 full).
        locomo_path: LoCoMo's data file or folder for the recall_view part (empty:
            the ``SWAPLESS_LOCOMO`` environment variable, else LoCoMo is skipped).
        structured_tools: Tools in the structured part's agent tool set (a coding
            agent's is about 20).
        fidelity_probes: Probe sizes of the fidelity check: ``full``, ``quick`` or
            ``smoke`` (`app.bench.parts.fidelity.PROBE_SIZES`).
        fidelity_cells: Cells of the fidelity check (``kv:4:64``, ``trim:splice``;
            the 16-bit control is added); empty: the whole grid.
        aged_contexts: Context lengths of the aged-KV comparison.
        aged_pass_keys: Pass keys asked per scheme and length.
        aged_scored_tokens: Last positions of the held-out text compared with full
            precision at each length.
        aged_decode_tokens: Greedy tokens timed per decode round.
        aged_decode_rounds: Interleaved decode timing rounds.
        ui_markdown_chars: Length of the Markdown reply streamed into the chat view.
        ui_cold_start_runs: App starts timed to first paint (the median counts).
        reasoning_turns: Thinking turns of the reasoning part's conversation.
        reasoning_max_tokens: Reply length (reasoning and answer) of each turn.
        reasoning_budget: Thinking budget of each turn.
        native_shape: Model shape of the native-kernel comparison (4-bit weights).
        native_pairs: Interleaved kernel/float32 decode pairs.
        native_decode_tokens: Greedy tokens timed per decode run.
        native_reps: Repetitions of each kernel bandwidth timing (the best counts).
        peers_shape: Model shape of the llama.cpp comparison (`parts.peers`).
        peers_threads: Thread counts both sides run at.
        peers_prefill: Prompt lengths of the prefill tests.
        peers_depths: Context depths of the decode tests.
        peers_decode_tokens: Tokens generated per decode test.
        peers_rounds: Interleaved rounds (each side once per test and round).
        peers_chat_turns: Turns of the chat held with llama-cpp-python
            (`parts.peers.chat_turns`).
        peers_chat_user_tokens: Tokens of each user message of that chat.
        peers_chat_max_tokens: Tokens of each reply of that chat.
        llama_bench: A ``llama-bench`` to compare with (empty:
            ``$SWAPLESS_LLAMA_BENCH``, else the ``make peers`` build).
    """

    quick: bool = False
    overhead_pairs: int = 24
    overhead_prompt_tokens: int = 256
    overhead_decode_tokens: int = 48
    overhead_kv_bits: int = 16
    kv_token_counts: tuple[int, ...] = (1024, 1300)
    kv_growth_tokens: int = 1000
    reuse_contexts: tuple[int, ...] = (1024, 2048)
    reuse_pairs: int = 3
    splice_kept_tokens: int = 2048
    splice_dropped_tokens: int = 1024
    splice_pairs: int = 3
    splice_kl_steps: int = 64
    conversation_turns: int = 60
    conversation_max_tokens: int = 24
    conversation_max_context: int = 1024
    speed_contexts: tuple[int, ...] = (1024, 4096, 8192)
    speed_reps: int = 3
    speed_decode_tokens: int = 48
    speed_warm_tokens: int = 128
    prefix_tokens: int = 2048
    prefix_pairs: int = 3
    longdoc_tokens: int = 60_000
    longdoc_segments: int = 6
    longdoc_decode_tokens: int = 16
    longdoc_budget_s: float = 150.0
    ui_seconds: float = 10.0
    limits_read_bytes: int = 2**30
    limits_gemm_size: int = 2048
    limits_row_matrix: tuple[int, ...] = (151936, 896)
    limits_repetitions: int = 5
    server_pairs: int = 12
    server_reuse_tokens: int = 1024
    server_reuse_pairs: int = 3
    arch_context_tokens: int = 2048
    arch_pairs: int = 2
    arch_names: tuple[str, ...] = ()
    recall_cases: int = 0
    locomo_path: str = ""
    structured_tools: int = 20
    fidelity_probes: str = "full"
    fidelity_cells: tuple[str, ...] = ()
    aged_contexts: tuple[int, ...] = (2048, 4096, 8192)
    aged_pass_keys: int = 10
    aged_scored_tokens: int = 512
    aged_decode_tokens: int = 32
    aged_decode_rounds: int = 3
    ui_markdown_chars: int = 200_000
    ui_cold_start_runs: int = 3
    reasoning_turns: int = 10
    reasoning_max_tokens: int = 96
    reasoning_budget: int = 64
    native_shape: str = "qwen05"
    native_pairs: int = 3
    native_decode_tokens: int = 24
    native_reps: int = 5
    peers_shape: str = "qwen05"
    peers_threads: tuple[int, ...] = (1, 2)
    # 8,192-token prefill is left out of a full run: ~10 minutes more on 2 cores.
    peers_prefill: tuple[int, ...] = (512, 2048)
    peers_depths: tuple[int, ...] = (512, 4096)
    peers_decode_tokens: int = 32
    peers_rounds: int = 2
    peers_chat_turns: int = 20
    peers_chat_user_tokens: int = 128
    peers_chat_max_tokens: int = 64
    llama_bench: str = ""

    def to_dict(self) -> dict:
        """Return the settings as JSON-ready values."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()
        }

    def with_changes(self, **changes) -> BenchSettings:
        """Return a copy with some sizes changed (tests shrink them)."""
        unknown = sorted(set(changes) - set(asdict(self)))
        if unknown:
            raise ValueError(
                f"unknown bench setting {unknown[0]!r}; allowed: "
                f"{', '.join(asdict(self))}"
            )
        return replace(self, **changes)


FULL = BenchSettings()
QUICK = BenchSettings(
    quick=True,
    overhead_pairs=6,
    overhead_decode_tokens=32,
    kv_token_counts=(256, 300),
    kv_growth_tokens=200,
    reuse_pairs=2,
    splice_dropped_tokens=128,
    splice_pairs=2,
    splice_kl_steps=32,
    conversation_turns=12,
    conversation_max_tokens=12,
    conversation_max_context=512,
    speed_contexts=(1024, 2048),
    speed_reps=2,
    speed_decode_tokens=24,
    speed_warm_tokens=64,
    prefix_tokens=2048,
    prefix_pairs=2,
    longdoc_tokens=1536,
    longdoc_segments=6,
    longdoc_decode_tokens=8,
    longdoc_budget_s=30.0,
    ui_seconds=5.0,
    server_pairs=6,
    server_reuse_pairs=2,
    arch_context_tokens=512,
    arch_pairs=1,
    fidelity_probes="quick",
    aged_contexts=(2048,),
    aged_pass_keys=4,
    aged_decode_tokens=16,
    aged_decode_rounds=2,
    ui_cold_start_runs=1,
    native_pairs=1,
    native_decode_tokens=12,
    native_reps=3,
    peers_prefill=(512,),
    peers_depths=(512,),
    peers_decode_tokens=16,
    peers_rounds=1,
    peers_chat_turns=6,
)
SMOKE = QUICK.with_changes(
    overhead_pairs=2,
    overhead_prompt_tokens=64,
    overhead_decode_tokens=8,
    kv_token_counts=(256, 300),
    kv_growth_tokens=200,
    reuse_contexts=(256,),
    reuse_pairs=1,
    splice_kept_tokens=256,
    splice_dropped_tokens=128,
    splice_pairs=1,
    splice_kl_steps=4,
    conversation_turns=5,
    conversation_max_tokens=8,
    conversation_max_context=256,  # the least a preset allows; turn 5 passes it
    speed_contexts=(64, 160),
    speed_reps=1,
    speed_decode_tokens=4,
    speed_warm_tokens=16,
    prefix_tokens=256,
    prefix_pairs=1,
    longdoc_tokens=900,
    longdoc_segments=3,
    longdoc_decode_tokens=6,
    longdoc_budget_s=30.0,
    ui_seconds=1.0,
    limits_read_bytes=16 * 2**20,
    limits_gemm_size=128,
    limits_row_matrix=(4096, 128),
    limits_repetitions=1,
    server_pairs=2,
    server_reuse_tokens=256,
    server_reuse_pairs=2,
    arch_context_tokens=160,
    arch_names=("qwen3_5", "qwen3"),
    # One conversation per recall cell and 2 tools (a 12K-token cold prefill with 20)
    # walk the same code: the two parts were about 3/4 of the smoke run.
    recall_cases=1,
    structured_tools=2,
    fidelity_probes="smoke",
    fidelity_cells=("kv:8:64", "kv:4:64", "trim:splice", "trim:none"),
    aged_contexts=(256,),
    aged_scored_tokens=128,
    aged_pass_keys=1,
    aged_decode_tokens=2,
    aged_decode_rounds=1,
    ui_markdown_chars=4000,
    reasoning_turns=2,
    reasoning_max_tokens=24,
    reasoning_budget=12,
    native_shape="tiny",
    native_decode_tokens=4,
    native_reps=1,
    peers_shape="tiny",
    peers_threads=(1,),
    peers_prefill=(64,),
    peers_depths=(64,),
    peers_decode_tokens=4,
    peers_chat_turns=2,
    peers_chat_user_tokens=16,
    peers_chat_max_tokens=4,
)
"""The smallest sizes that still run every part's code end to end on the ``tiny``
model: what the test suite runs (tests/bench/test_parts_smoke.py), not a measurement."""


@dataclass(frozen=True)
class Target:
    """What a ratio should be.

    Attributes:
        kind: ``at_least``, ``at_most`` or ``within``.
        value: The bound (or the centre for ``within``).
        tolerance: Half-width for ``within``.
    """

    kind: str
    value: float
    tolerance: float = 0.0

    def holds(self, ratio: float) -> bool:
        """Return True when ``ratio`` meets the target."""
        if self.kind == "at_least":
            return ratio >= self.value
        if self.kind == "at_most":
            return ratio <= self.value
        if self.kind == "within":
            # Rounded so that 1.02 passes "1.00 ± 0.02" despite float noise.
            return round(abs(ratio - self.value), 9) <= self.tolerance
        raise ValueError(f"unknown target kind {self.kind!r}")

    def text(self) -> str:
        """Return the target as written in the table (e.g. ``≥ 0.95``)."""
        if self.kind == "at_least":
            return f"≥ {self.value:g}"
        if self.kind == "at_most":
            return f"≤ {self.value:g}"
        return f"{self.value:.2f} ± {self.tolerance:.2f}"


TARGETS: dict[str, Target] = {
    "engine_vs_mlx_lm": Target("at_least", 0.95),
    "kv_bytes_measured_vs_predicted": Target("within", 1.0, 0.02),
    "turn_reuse_vs_reprefill": Target("at_most", 0.2),
    "splice_vs_rebuild": Target("at_most", 0.15),
    "prefix_memory_vs_cold": Target("at_most", 0.1),
    "prefix_disk_vs_cold": Target("at_most", 0.3),
    "server_vs_engine": Target("at_least", 0.95),
    "server_reuse_vs_fresh": Target("at_most", 0.2),
    "longdoc_segment_tps_last_vs_first": Target("at_least", 0.9),
    "structured_vs_free": Target("at_least", 0.9),
    "reasoning_history_reused": Target("at_least", 0.95),
    "reasoning_kv_vs_answers_alone": Target("at_most", 1.1),
    "lazy_call_vs_free": Target("at_least", 0.9),
    "kv_decode_vs_16bit": Target("at_least", 0.9),
}
