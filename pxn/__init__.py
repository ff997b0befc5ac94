"""gepa-pxn: predict the wall-clock of batched GEPA runs before paying for them."""

__version__ = "0.1.0"
