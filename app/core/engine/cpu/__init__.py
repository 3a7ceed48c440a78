"""Speed on MLX's CPU backend: which backend and BLAS this machine uses, attention written
for the CPU (vectorizable softmax, GQA heads as matmul rows), products over
quantized KV, and the native kernel (quantized weight products, their widening for long
inputs, the gated MLP's activation).

May import mlx; nothing above the engine. On Metal these modules step aside for mlx-lm's
own kernels.
"""
