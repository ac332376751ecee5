"""Draw a digit in the browser; the book's best trained Vision Transformer answers (article 3's app).

``python -m vitbn_nb.app`` (or ``make app``) serves http://127.0.0.1:5000/: the best finished ViT-family run of the
store (:func:`model_choice`; with none, a small ViTBNFFN is trained first), the drawing made like MNIST's digits.
"""

from ..store.servable import model_choice  # noqa: F401 -- the app's public names
from .server import (  # noqa: F401
    BadImage,
    create_app,
    load_model,
    mnist_style,
    predict,
    preprocess,
)
