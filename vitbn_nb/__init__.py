"""vitbn_nb: the helper package of vitbn-book, a reproduction book for "BatchNorm in Vision Transformers".

Models (``vitbn_nb.models``), data (``data``), the training engine (``engine``), the run store
(``runs``), profiles, figures, Bayesian optimisation (``hpo``), MLflow mirroring (``tracking``),
the benchmark (``bench``), the book runner (``book``), one module per chapter (``studies``) and
the digit-drawing app (``app``). ``python -m vitbn_nb --help`` lists the commands.
"""

__version__ = "0.1.0"
