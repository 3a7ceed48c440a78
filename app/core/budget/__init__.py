"""The memory budget: what a model and its KV cache will take, before loading anything.

Pure Python over config.json and the safetensors headers (no MLX, no Qt), so the engine,
the CLI, the UI and the doctor can all ask "does this fit?" without a model in memory:

* `model_geometry` reads config.json into a `ModelGeometry` (one `LayerCache` per layer,
  as mlx-lm will allocate it; see `layer_plans`);
* `kv_budget` turns a geometry into exact KV bytes per token and at a context length;
* `weights` sizes the weights from the safetensors headers;
* `memory_budget` holds the settings, the max safe context and the checks that raise
  `BudgetError` before anything is allocated.
"""

from app.core.budget.device_budget import DeviceBudget
from app.core.budget.kv_budget import (
    ALLOCATION_STEP,
    STATE_CHECKPOINTS,
    bounded_kv_bytes,
    bytes_per_element,
    bytes_per_token,
    checkpoint_bytes,
    fixed_kv_bytes,
    kv_bytes_at,
    prefill_scores_bytes,
    validate_kv_quantization,
)
from app.core.budget.layers import LayerCache, LayerKind
from app.core.budget.memory_budget import (
    BudgetSettings,
    check_kv_growth,
    check_model_fits,
    check_request_fits,
    kv_limit_bytes,
    max_safe_context,
    memory_budget_bytes,
    within_trained_context,
)
from app.core.budget.model_geometry import (
    ModelGeometry,
    geometry_from_config,
    read_geometry,
)
from app.core.budget.weights import (
    WeightsInfo,
    dense_resident_bytes,
    read_weights,
    weights_bytes,
)

__all__ = [
    "ALLOCATION_STEP",
    "STATE_CHECKPOINTS",
    "BudgetSettings",
    "DeviceBudget",
    "LayerCache",
    "LayerKind",
    "ModelGeometry",
    "WeightsInfo",
    "bounded_kv_bytes",
    "bytes_per_element",
    "bytes_per_token",
    "check_kv_growth",
    "checkpoint_bytes",
    "check_model_fits",
    "check_request_fits",
    "dense_resident_bytes",
    "fixed_kv_bytes",
    "geometry_from_config",
    "kv_bytes_at",
    "kv_limit_bytes",
    "max_safe_context",
    "within_trained_context",
    "memory_budget_bytes",
    "prefill_scores_bytes",
    "read_geometry",
    "read_weights",
    "validate_kv_quantization",
    "weights_bytes",
]
