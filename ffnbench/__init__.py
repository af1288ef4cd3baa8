"""ffnbench: decoder-only language models that differ only in their feed-forward network."""

__version__ = "0.1.0"
