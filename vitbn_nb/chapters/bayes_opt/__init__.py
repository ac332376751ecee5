"""Chapter 04: article 1's Experiment 2, Bayesian optimisation of lr and batch size, then the optimised runs."""
