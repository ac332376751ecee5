"""What every chapter's claims share: the one rule that judges a claim (``verdicts``), the claim type and the helpers
that judge one (``claims``), picking runs from a run table (``selection``), the checkpoint audit (``audit``)."""
