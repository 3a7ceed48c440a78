"""`python -m app` runs the same entry point as the `swapless` console script."""

from app.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
