"""Chapter 02: the models, built and measured (parameters, FLOPs, the reference ViT), nothing trained."""
