"""Chapter 06: the depth-6 models, optimised on augmented MNIST, tested on a transfer set."""
