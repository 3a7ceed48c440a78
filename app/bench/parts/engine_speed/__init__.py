"""Bench parts that time the engine itself on one model: the overhead around the
forward pass (`engine_overhead`, with the decode step taken apart by `decode_split`) and
the native quantized kernel against the float32 path (`native_kernel`). May import
`app.core` and MLX (the bench measures the engine)."""
