"""A fast system BLAS for MLX's CPU backend on Linux.

`preload` finds BLIS (else OpenBLAS) and re-executes the CLI with it preloaded in
place of the slow reference BLAS the ``mlx[cpu]`` wheel links; `blis_arch` picks
BLIS's kernels by measurement where its own CPU detection falls back to 'generic'.
"""
