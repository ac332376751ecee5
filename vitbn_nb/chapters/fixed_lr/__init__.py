"""Chapter 03: article 1's Experiment 1 at three fixed learning rates, as run and as written, with the learning-rate
sweep and time to accuracy."""
