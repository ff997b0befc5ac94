"""The simulator: a SimPy model of batched GEPA, its closed-form twin, sweeps and presets."""
