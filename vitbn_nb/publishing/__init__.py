"""Publishing: the book's render (papermill, HTML), its figures and their manifest, the README's generated blocks, the
Colab install cell."""
