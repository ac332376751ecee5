"""Chapter 05: article 2's depth study, ViT against ViTBNFFN at the same depth (Figs 8-10)."""
