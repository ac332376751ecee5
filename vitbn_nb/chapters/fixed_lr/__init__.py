"""Chapter 03: article 1's Experiment 1 at three fixed lrs, as run and as written, the lr sweep, time to accuracy."""
