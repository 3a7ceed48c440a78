"""Swapless: chat with local MLX models without letting the KV cache eat the machine."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("swapless")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
