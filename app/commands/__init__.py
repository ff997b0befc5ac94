"""The commands of `pxn`, one module per group: predict, calibrate, measure, lm."""
