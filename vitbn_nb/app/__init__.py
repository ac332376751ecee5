"""Draw a digit in the browser; the book's best trained Vision Transformer answers (article 3's app).

``python -m vitbn_nb.app`` (or ``make app``) serves the page on http://127.0.0.1:5000/. The
model is the best finished ViT-family run in the run store (:func:`model_choice`), loaded
once at start; with an empty store a small ViTBNFFN is trained first, through the run store.
The drawing is preprocessed on the server the way MNIST's digits were made (:func:`preprocess`).
"""

from .server import (
    FALLBACK,
    BadImage,
    create_app,
    load_model,
    mnist_style,
    model_choice,
    predict,
    preprocess,
    read_image,
)

__all__ = [
    "FALLBACK",
    "BadImage",
    "create_app",
    "load_model",
    "mnist_style",
    "model_choice",
    "predict",
    "preprocess",
    "read_image",
]
