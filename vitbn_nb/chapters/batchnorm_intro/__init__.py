"""Chapter 01: article 2's DNN experiment, with and without BatchNorm (settings, plan and run, views)."""
