"""The benchmark's parts: each module measures one thing and returns a `PartResult` of rows
(`run(context)`); the runner in `app.bench` picks them by name from
`app.bench.registry`.

May import the whole app (MLX included: parts measure plain mlx-lm side by side) and
`app.bench` helpers; the product never imports them.
"""
