"""The built-in scenarios (the paper's case study) and sweep grids."""
